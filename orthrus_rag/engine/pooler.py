"""Incremental pooling of hidden states across chunks: mean (fp32 running sum and count), last, cls."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PoolState:
    """What an embedding request keeps between chunks: O(hidden) memory, whatever the input length."""

    pooling: str
    total: torch.Tensor | None = None  # mean: running fp32 sum; last/cls: the chosen row
    count: int = 0

    def update(self, hidden: torch.Tensor, is_first_chunk: bool) -> None:
        """Fold one chunk of final hidden states, shape (n_tokens, hidden), into the state."""
        if self.pooling == "mean":
            chunk_sum = hidden.float().sum(dim=0)
            self.total = chunk_sum if self.total is None else self.total + chunk_sum
        elif self.pooling == "cls" and is_first_chunk:
            self.total = hidden[0].float()
        elif self.pooling == "last":
            self.total = hidden[-1].float()
        self.count += hidden.shape[0]

    def result(self, normalize: bool) -> torch.Tensor:
        assert self.total is not None and self.count > 0, "pooled before any chunk"
        vector = self.total / self.count if self.pooling == "mean" else self.total
        return F.normalize(vector, dim=-1) if normalize else vector
