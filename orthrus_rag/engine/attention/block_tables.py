"""The step as paged kernels (vLLM CPU, flash-attn) read it: per sequence its queries, its keys and its block table,
as device integers; `BlockTableBackend` plans it for them."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch

from orthrus_rag.engine.attention.base import AttentionBackend, Segment, StepAttention


@dataclass
class KernelLayout:
    block_table: torch.Tensor  # (S, max blocks) int32
    query_start: torch.Tensor  # (S + 1,) int32: cumulative query rows
    key_start: torch.Tensor  # (S + 1,) int32: cumulative keys
    seq_lens: torch.Tensor  # (S,) int32: keys of each sequence, this chunk included
    max_queries: int
    max_keys: int
    page: int  # tokens per block


def host_integers(segments: list[Segment]) -> list[list[int]]:
    """Padded block tables, cumulative query rows, cumulative keys, keys per sequence."""
    width = max(len(s.table) for s in segments)
    key_lens = [s.num_keys for s in segments]
    return [[x for s in segments for x in s.table + [0] * (width - len(s.table))],
            list(accumulate((s.n for s in segments), initial=0)), list(accumulate(key_lens, initial=0)), key_lens]


def layout(segments: list[Segment], device_integers: list[torch.Tensor], page: int) -> KernelLayout:
    tables, query_start, key_start, seq_lens = (x.int() for x in device_integers)
    return KernelLayout(tables.view(len(segments), -1), query_start, key_start, seq_lens,
                        max(s.n for s in segments), max(s.num_keys for s in segments), page)


@dataclass
class KernelStep(StepAttention):
    kernel: KernelLayout | None = None


class BlockTableBackend(AttentionBackend):
    """A backend whose kernel reads each sequence's block table: the step's plan is its `KernelLayout`, in a
    `step_class` (a KernelStep)."""

    step_class: type[KernelStep] = KernelStep

    def host_integers(self, segments: list[Segment]) -> list[list[int]]:
        return host_integers(segments)

    def plan(self, cache, write_slots, segments, device_integers) -> KernelStep:
        return self.step_class(self, cache, write_slots, layout(segments, device_integers, self.geometry.block_size))
