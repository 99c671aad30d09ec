"""Retrievers: turn a query into the k most relevant passages. `DenseRetriever` searches a dense index with the
query's embedding, `BM25Retriever` scores the corpus text (indexes/bm25_index.py holds its index), and
`HybridRetriever` fuses several of them by reciprocal rank."""
from __future__ import annotations

import asyncio
import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from orthrus_rag.engine import EngineLike
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.rag.types import Passage

RRF_K = 60.0
CANDIDATES = 15


@dataclass
class Retrieval:
    """The passages found for one query, and how many tokens embedding the query took."""

    passages: list[Passage] = field(default_factory=list)
    query_tokens: int = 0


class Retriever(ABC):
    """Anything that finds passages for a query. Subclasses write `retrieve`."""

    @abstractmethod
    async def retrieve(self, query: str, k: int) -> list[Passage]:
        """The k best passages for `query`, best first."""

    async def retrieve_with_usage(self, query: str, k: int) -> Retrieval:
        """Like `retrieve`, with token counts when the retriever knows them (pipelines trace this)."""
        return Retrieval(await self.retrieve(query, k))


class IndexRecipeError(ValueError):
    """An index whose vectors were made another way (pooling, prefixes, adapter) than the retriever's queries."""


class DenseRetriever(Retriever):
    """Embeds the query (its recipe's `query_prefix` first) through the engine, in its shared inference loop, and
    searches a dense index (anything with batched inner-product search, `search(query_vectors, k)` -> each row's
    passages, as indexes.DenseIndex); an index whose manifest records another recipe is refused."""

    def __init__(self, engine: EngineLike, index: Any, embedding: EmbeddingRecipe | None = None):
        self.engine = engine
        self.index = index
        self.embedding = embedding or EmbeddingRecipe()
        recorded = getattr(getattr(index, "manifest", None), "embedding", None)  # the recipe its manifest records
        if recorded is not None and recorded != self.embedding.recipe():
            then, now = (", ".join(f"{k}={v!r}" for k, v in r.items()) for r in (recorded, self.embedding.recipe()))
            raise IndexRecipeError(f"the index was embedded with {then or 'no recorded recipe'}, "
                                   f"but queries would be embedded with {now}: "
                                   "rebuild the index with the same embedder settings (orthrus-rag-index embedder=...) "
                                   "or use the embedder settings it was built with")

    async def retrieve(self, query: str, k: int) -> list[Passage]:
        return (await self.retrieve_with_usage(query, k)).passages

    async def retrieve_with_usage(self, query: str, k: int) -> Retrieval:
        _check_query(query, k)
        out = await self.engine.embed(self.embedding.query_prefix + query, self.embedding.params)
        vector = np.asarray(out.embedding, dtype=np.float32)
        if vector.ndim != 1:
            raise ValueError(f"engine.embed returned an embedding of shape {vector.shape}; expected (dim,)")
        passages = self.index.search(vector[None], k)[0]
        return Retrieval(list(passages), out.num_tokens)


class BM25Retriever(Retriever):
    """Scores passages by the query's terms, no embedding, through an index with `search_text(query, k)` -> the k
    best passages, best first (orthrus_rag.indexes.bm25_index.BM25Index). A query sharing no term with the corpus finds nothing."""

    def __init__(self, index: Any):
        self.index = index

    async def retrieve(self, query: str, k: int) -> list[Passage]:
        _check_query(query, k)
        return self.index.search_text(query, k)


class HybridRetriever(Retriever):
    """Each of `retrievers` (dense and BM25) ranks max(candidates, k) passages for the query, and reciprocal-rank
    fusion merges their rankings (in this order for ties) into the k returned; the fused `score` is the RRF score."""

    def __init__(self, retrievers: Sequence[Retriever], rrf_k: float = RRF_K, candidates: int = CANDIDATES):
        if not retrievers:
            raise ValueError("a hybrid retriever needs at least one retriever to fuse")
        check_fusion(rrf_k, candidates)
        self.retrievers, self.rrf_k, self.candidates = list(retrievers), rrf_k, candidates

    async def retrieve(self, query: str, k: int) -> list[Passage]:
        return (await self.retrieve_with_usage(query, k)).passages

    async def retrieve_with_usage(self, query: str, k: int) -> Retrieval:
        _check_query(query, k)
        depth = max(self.candidates, k)
        found = await asyncio.gather(*(r.retrieve_with_usage(query, depth) for r in self.retrievers))
        fused = reciprocal_rank_fusion([f.passages for f in found], k, self.rrf_k)
        return Retrieval(fused, sum(f.query_tokens for f in found))


@dataclass
class _Fused:
    passage: Passage
    score: float
    best: tuple[int, int]  # (best rank, index of the first ranking holding it at that rank)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Passage]], k: int, rrf_k: float = RRF_K) -> list[Passage]:
    """The k best passages of the fused rankings, best first, `score` set to the fused score (Cormack, Clarke and
    Buettcher, SIGIR 2009: by rank alone, so scores on different scales, BM25 and cosine, need no calibration).

    A passage ranked r (1 = best) in a ranking earns 1 / (rrf_k + r) from it; its fused score is the sum over the
    rankings that contain it. Ties in fused score are broken by the passage's best rank in any ranking, then by the
    order the rankings are given in (the first ranking wins), which orders any two distinct passages. Passages are
    the same passage when their ids are equal; the copy from the first ranking that holds it is returned."""
    check_fusion(rrf_k)
    fused: dict[str, _Fused] = {}
    for which, ranking in enumerate(rankings):
        for rank, passage in enumerate(ranking, start=1):
            entry = fused.setdefault(passage.id, _Fused(passage, 0.0, (rank, which)))
            entry.score += 1.0 / (rrf_k + rank)
            entry.best = min(entry.best, (rank, which))
    ordered = sorted(fused.values(), key=lambda e: (-e.score, e.best))
    return [dataclasses.replace(e.passage, score=e.score) for e in ordered[:k]]


def check_fusion(rrf_k: float, candidates: int = CANDIDATES, group: str = "") -> None:
    """The one check of the fusion settings: a ValueError naming the bad one (after `group`, e.g. "index.")."""
    if not rrf_k >= 0:
        raise ValueError(f"{group}rrf_k must be >= 0, got {rrf_k!r}")
    if candidates < 1:
        raise ValueError(f"{group}candidates must be >= 1, got {candidates!r}")


def _check_query(query: str, k: int) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"a retrieval query must be a non-empty string, got {query!r}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
