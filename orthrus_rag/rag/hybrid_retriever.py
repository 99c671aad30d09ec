"""Hybrid retrieval: several retrievers (dense and BM25) each rank `candidates` passages for the query, and
reciprocal-rank fusion (orthrus_rag/rag/fusion.py) merges their rankings into the k passages returned."""
from __future__ import annotations

import asyncio
from typing import Sequence

from orthrus_rag.rag.fusion import RRF_K, reciprocal_rank_fusion
from orthrus_rag.rag.retriever import Retrieval, Retriever, _check_query
from orthrus_rag.rag.types import Passage

CANDIDATES = 15


class HybridRetriever(Retriever):
    """Fuses the rankings of `retrievers` (in this order for ties: see fusion.py). Each contributes
    max(candidates, k) passages; the fused `score` is the RRF score."""

    def __init__(self, retrievers: Sequence[Retriever], rrf_k: float = RRF_K, candidates: int = CANDIDATES):
        if not retrievers:
            raise ValueError("a hybrid retriever needs at least one retriever to fuse")
        if rrf_k < 0 or candidates < 1:
            raise ValueError(f"rrf_k must be >= 0 and candidates >= 1, got rrf_k={rrf_k!r}, candidates={candidates!r}")
        self.retrievers, self.rrf_k, self.candidates = list(retrievers), rrf_k, candidates

    async def retrieve(self, query: str, k: int) -> list[Passage]:
        return (await self.retrieve_with_usage(query, k)).passages

    async def retrieve_with_usage(self, query: str, k: int) -> Retrieval:
        _check_query(query, k)
        depth = max(self.candidates, k)
        found = await asyncio.gather(*(r.retrieve_with_usage(query, depth) for r in self.retrievers))
        fused = reciprocal_rank_fusion([f.passages for f in found], k, self.rrf_k)
        return Retrieval(fused, sum(f.query_tokens for f in found))
