"""How the stack retrieves (`index.retrieval`): dense search through the engine's embedder, BM25 over the corpus
text, or both fused by reciprocal rank. The indexes a mode needs, and the Retriever pipelines get over them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from orthrus_rag.rag.retriever import (CANDIDATES, RRF_K, BM25Retriever, DenseRetriever, HybridRetriever, Retriever,
                                       check_fusion)

if TYPE_CHECKING:
    from orthrus_rag.indexes import DenseIndex
    from orthrus_rag.indexes.bm25_index import BM25Index
    from orthrus_rag.engine import EngineLike
    from orthrus_rag.rag.embedding import EmbeddingRecipe

RetrievalMode = Literal["dense", "bm25", "hybrid"]
RETRIEVAL_MODES: tuple[str, ...] = get_args(RetrievalMode)


@dataclass(frozen=True)
class RetrievalSettings:
    """`index.retrieval`, `index.rrf_k` and `index.candidates`: their one default each (IndexSpec takes them from
    here). For hybrid: `rrf_k` (the constant k of 1 / (k + rank)) and `candidates` (passages each side ranks before
    fusion; at least the k a pipeline asks for)."""

    # dense | bm25 | hybrid: the embedder's index, BM25 over the corpus text, or both fused by rank (the default,
    # chosen on 2Wiki dev recall: docs/results.md, docs/experiments.md#hybrid-retrieval)
    mode: RetrievalMode = "hybrid"
    rrf_k: float = RRF_K
    candidates: int = CANDIDATES

    def __post_init__(self):
        if self.mode not in RETRIEVAL_MODES:
            raise ValueError(f"index.retrieval must be one of {', '.join(RETRIEVAL_MODES)}, got {self.mode!r}")
        check_fusion(self.rrf_k, self.candidates, "index.")

    @property
    def uses_dense(self) -> bool:
        return self.mode in ("dense", "hybrid")

    @property
    def uses_bm25(self) -> bool:
        return self.mode in ("bm25", "hybrid")


@dataclass
class SearchIndexes:
    """The indexes one retrieval mode searches: the dense index, the BM25 index, or both."""

    dense: DenseIndex | None
    bm25: BM25Index | None
    settings: RetrievalSettings


def make_retriever(engine: EngineLike, indexes: SearchIndexes, embedding: EmbeddingRecipe) -> Retriever:
    """The Retriever over `indexes` for its mode: one side, or both fused."""
    settings = indexes.settings
    sides = [DenseRetriever(engine, indexes.dense, embedding)] if settings.uses_dense else []
    sides += [BM25Retriever(indexes.bm25)] if settings.uses_bm25 else []
    return HybridRetriever(sides, settings.rrf_k, settings.candidates) if settings.mode == "hybrid" else sides[0]
