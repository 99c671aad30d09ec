"""Reciprocal-rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009): merge rankings from different retrievers
by rank alone, so scores on different scales (BM25, cosine) need no calibration.

A passage ranked r (1 = best) in a ranking earns 1 / (rrf_k + r) from it; its fused score is the sum over the
rankings that contain it. Ties in fused score are broken by the passage's best rank in any ranking, then by the
order the rankings are given in (the first ranking wins), which orders any two distinct passages.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from orthrus_rag.rag.types import Passage

RRF_K = 60.0


@dataclasses.dataclass
class _Fused:
    passage: Passage
    score: float
    best: tuple[int, int]  # (best rank, index of the first ranking holding it at that rank)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Passage]], k: int, rrf_k: float = RRF_K) -> list[Passage]:
    """The k best passages of the fused rankings, best first, `score` set to the fused score. Passages are the
    same passage when their ids are equal; the copy from the first ranking that holds it is returned."""
    if rrf_k < 0:
        raise ValueError(f"rrf_k must be >= 0, got {rrf_k!r}")
    fused: dict[str, _Fused] = {}
    for which, ranking in enumerate(rankings):
        for rank, passage in enumerate(ranking, start=1):
            entry = fused.setdefault(passage.id, _Fused(passage, 0.0, (rank, which)))
            entry.score += 1.0 / (rrf_k + rank)
            entry.best = min(entry.best, (rank, which))
    ordered = sorted(fused.values(), key=lambda e: (-e.score, e.best))
    return [dataclasses.replace(e.passage, score=e.score) for e in ordered[:k]]
