"""What the scheduler hands the model runner for one step, and what comes back."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from orthrus_rag.engine.sequence import Sequence


@dataclass
class ScheduledChunk:
    """`num_tokens` tokens of `seq`, starting at `start` (its `num_computed` when scheduled), run this step; before
    them, the `recompute` runs [start, end) of copied passages (runtime.passage_reuse=blend), computed again."""

    seq: Sequence
    num_tokens: int
    recompute: list[tuple[int, int]] = field(default_factory=list)
    start: int = field(init=False)
    completes: bool = field(init=False)  # after this chunk the sequence samples (generate) or pools (embed)
    is_decode: bool = field(init=False)  # the sequence's `is_decode` when scheduled

    def __post_init__(self) -> None:
        self.start = self.seq.num_computed
        self.completes = self.start + self.num_tokens == self.seq.num_tokens
        self.is_decode = self.seq.is_decode

    @property
    def num_rows(self) -> int:
        """Rows this chunk adds to the step: its tokens and the recomputed ones."""
        return self.num_tokens + rows(self.recompute)


def rows(runs: list[tuple[int, int]]) -> int:
    """Tokens in the runs [start, end)."""
    return sum(end - start for start, end in runs)


@dataclass
class Install:
    """A stored passage copied into `seq`'s tokens [start, end) before the step's forward pass, its first
    `recomputed` tokens then computed again in that pass (blend)."""

    seq: Sequence
    start: int
    end: int
    key: bytes
    recomputed: int = 0


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)  # generation first, backbone embeddings last
    installs: list[Install] = field(default_factory=list)  # stored passages placed this step (blend, full_reuse)
    embedder_seqs: list[Sequence] = field(default_factory=list)  # co-located embedder, whole inputs
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_backbone_tokens(self) -> int:
        return sum(c.num_rows for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks and not self.embedder_seqs


@dataclass
class ModelOutput:
    """Per completing generation chunk one logits row; per embedding chunk its final hidden states."""

    logit_ids: list[str] = field(default_factory=list)  # the request of each logits row
    logits: torch.Tensor | None = None  # (len(logit_ids), vocab)
    hidden: dict[str, torch.Tensor] = field(default_factory=dict)  # request_id -> (n_tokens, hidden)
    tokens: dict[str, int] = field(default_factory=dict)  # request_id -> sampled token; empty if the batch failed
