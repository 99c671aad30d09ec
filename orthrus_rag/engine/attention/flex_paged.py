"""torch's FlexAttention over the paged pool on CUDA: ONE call per layer for every sequence of the step, decodes
and chunks alike, with a block mask that lets each query see only the slots of its own sequence's block table (blocks
shared through the prefix cache included) at the positions it may see. The cache is the flat one, read in place as
(kv_heads, slots, head_dim), up to the last block the step reads.

Compiled with the Triton that CUDA builds of torch carry. On CPU it runs eagerly when named (exact and slow: the
engine's tests run on it) and `auto` leaves it out there: compiled FlexAttention on CPU was slower than
`sdpa_in_place` where it was measured (docs/engine.md)."""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field

import torch

from orthrus_rag.engine.attention.base import AttentionBackend, Geometry, Segment, StepAttention


@dataclass
class FlexStep(StepAttention):
    q_seq: torch.Tensor | None = None  # (T,) the sequence of each packed row
    q_pos: torch.Tensor | None = None  # (T,) its position
    num_keys: torch.Tensor | None = None  # (S,) keys of each sequence, this step's included
    logical: torch.Tensor | None = None  # (S, blocks up to the last one read): a block's index in a table, or -1
    block_size: int = 16
    _masks: dict = field(default_factory=dict)

    def block_mask(self, causal: bool, window: int | None):
        """The step's block mask for one kind of layer, built once and read by every layer of that kind."""
        if (causal, window) not in self._masks:
            from torch.nn.attention.flex_attention import create_block_mask

            q_seq, q_pos, num_keys, logical, block = self.q_seq, self.q_pos, self.num_keys, self.logical, \
                self.block_size

            def sees(b, h, q, k):
                seq, j = q_seq[q], logical[q_seq[q], k // block]
                pos = j * block + k % block
                allowed = (j >= 0) & (pos < num_keys[seq])
                if causal:
                    allowed = allowed & (pos <= q_pos[q])
                if window is not None:
                    allowed = allowed & ((q_pos[q] - pos).abs() < window)
                return allowed

            device = self.q_seq.device
            self._masks[(causal, window)] = create_block_mask(sees, None, None, len(q_seq),
                                                              logical.shape[1] * block, device=str(device),
                                                              _compile=device.type == "cuda")
        return self._masks[(causal, window)]


class FlexPaged(AttentionBackend):
    name = "flex_paged"

    @staticmethod
    def unsupported(geometry: Geometry) -> str | None:
        try:
            import torch.nn.attention.flex_attention  # noqa: F401
        except ImportError:
            return "this torch has no FlexAttention"
        return None

    @staticmethod
    def candidate(geometry: Geometry) -> bool:
        return geometry.device.type == "cuda"

    def host_integers(self, segments: list[Segment]) -> list[list[int]]:
        """Per packed row its sequence and position; per sequence its keys; per block-table entry its sequence,
        physical block and index in the table."""
        blocks = [(i, b, j) for i, s in enumerate(segments)
                  for j, b in enumerate(s.key_blocks(self.geometry.block_size))]
        return [[i for i, s in enumerate(segments) for _ in range(s.n)],
                [p for s in segments for p in range(s.ctx, s.num_keys)], [s.num_keys for s in segments],
                [i for i, _, _ in blocks], [b for _, b, _ in blocks], [j for _, _, j in blocks]]

    def plan(self, cache, write_slots, segments, device_integers) -> FlexStep:
        q_seq, q_pos, num_keys, entry_seq, entry_block, entry_index = device_integers
        pool_blocks = 1 + max(b for s in segments for b in s.key_blocks(self.geometry.block_size))
        logical = torch.full((len(segments), pool_blocks), -1, dtype=torch.long, device=q_seq.device)
        logical.index_put_((entry_seq, entry_block), entry_index)
        return FlexStep(self, cache, write_slots, q_seq=q_seq, q_pos=q_pos, num_keys=num_keys, logical=logical,
                        block_size=self.geometry.block_size)

    def attend(self, step: FlexStep, layer, q, scale, causal, window) -> torch.Tensor:
        cache, kv, dim = step.cache, step.cache.num_kv_heads, step.cache.head_dim
        slots = step.logical.shape[1] * step.block_size  # the pool up to the last block this step reads
        keys = cache.k[layer][:slots].view(-1, kv, dim).transpose(0, 1)[None]  # (1, kv_heads, slots, d): a view
        values = cache.v[layer][:slots].view(-1, kv, dim).transpose(0, 1)[None]
        out = _flex(q.device.type)(q.to(cache.dtype).transpose(0, 1)[None], keys, values,
                                   block_mask=step.block_mask(causal, window), scale=scale,
                                   enable_gqa=q.shape[1] != kv)
        return out[0].transpose(0, 1).to(q.dtype)


@functools.cache
def _flex(device_type: str):
    """Compiled on CUDA; eager elsewhere, without torch's warning that eager is unfused (it is meant here)."""
    from torch.nn.attention.flex_attention import flex_attention

    if device_type == "cuda":
        return torch.compile(flex_attention, dynamic=True)

    def eager(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return flex_attention(*args, **kwargs)

    return eager
