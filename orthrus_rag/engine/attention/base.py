"""What an attention backend is: the one interface the model runner and the transformers hook call.

A backend owns its KV cache (layout, dtype, how rows are written), plans a step's metadata once from the packed
batch, and attends one layer's queries against the cache in place. The runner names no backend."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from orthrus_rag.engine.kv_cache import PagedKVCache


@dataclass(frozen=True)
class Geometry:
    """What a backend is chosen and built for: the device, the model's dtype and attention shape, the block size."""

    device: torch.device
    dtype: torch.dtype
    block_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class Segment:
    """One chunk of the packed step: rows [row, row + n) at positions [ctx, ctx + n), its keys in `table`'s
    blocks."""

    row: int
    n: int
    ctx: int
    table: list[int]

    @property
    def num_keys(self) -> int:
        return self.ctx + self.n

    def key_blocks(self, block_size: int) -> list[int]:
        """The blocks of `table` that hold its keys (the table may run further)."""
        return self.table[:-(-self.num_keys // block_size)]


@dataclass
class StepAttention:
    """A step's attention inputs, planned once from the batch and read by every layer. Backends subclass it."""

    backend: AttentionBackend
    cache: PagedKVCache
    write_slots: torch.Tensor  # (T,) cache slot of every packed row's K/V


class AttentionBackend:
    """The base of every backend; a subclass sets `name`, may refuse a geometry, and implements `attend`."""

    name: ClassVar[str]

    def __init__(self, geometry: Geometry):
        self.geometry = geometry

    @staticmethod
    def unsupported(geometry: Geometry) -> str | None:
        """Why this backend cannot run for `geometry` on this machine, or None."""
        return None

    @staticmethod
    def candidate(geometry: Geometry) -> bool:
        """Whether `auto` times this backend for `geometry` (where it runs; a backend known to lose may say no)."""
        return True

    @property
    def cache_dtype(self) -> torch.dtype:
        return self.geometry.dtype

    def make_cache(self, num_layers: int, num_slots: int) -> PagedKVCache:
        g = self.geometry
        return PagedKVCache(num_layers, num_slots, g.num_kv_heads, g.head_dim, self.cache_dtype, g.device)

    def host_integers(self, segments: list[Segment]) -> list[list[int]]:
        """Integers this backend needs on the device, moved in the step's one transfer (see `plan`)."""
        return []

    def plan(self, cache: PagedKVCache, write_slots: torch.Tensor, segments: list[Segment],
             device_integers: list[torch.Tensor]) -> StepAttention:
        """The step's metadata; `device_integers` are `host_integers(segments)` on the device, in order."""
        raise NotImplementedError

    def attend(self, step: StepAttention, layer: int, q: torch.Tensor, scale: float | None, causal: bool,
               window: int | None) -> torch.Tensor:
        """q (T, heads, d) of the packed rows against each row's own keys in the cache (this step's rows written
        already): (T, heads, d) in q's dtype."""
        raise NotImplementedError
