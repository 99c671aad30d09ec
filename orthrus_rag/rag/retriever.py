"""Retrievers: turn a query into the k most relevant passages."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from orthrus_rag.engine import EngineLike
from orthrus_rag.rag.embedding import EmbeddingRecipe, describe_recipe
from orthrus_rag.rag.types import Passage


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


class SearchIndex(Protocol):
    """What `DenseRetriever` needs from an index: batched inner-product search."""

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[Passage]]: ...


class IndexRecipeError(ValueError):
    """An index whose vectors were made another way (pooling, prefixes, adapter) than the retriever's queries."""


class DenseRetriever(Retriever):
    """Embeds the query (its recipe's `query_prefix` first) through the engine, in its shared inference loop, and
    searches a dense index; an index whose manifest records another recipe is refused."""

    def __init__(self, engine: EngineLike, index: SearchIndex, embedding: EmbeddingRecipe | None = None):
        self.engine = engine
        self.index = index
        self.embedding = embedding or EmbeddingRecipe()
        recorded = getattr(getattr(index, "manifest", None), "embedding", None)  # the recipe its manifest records
        if recorded is not None and recorded != self.embedding.recipe():
            raise IndexRecipeError(f"the index was embedded with {describe_recipe(recorded) or 'no recorded recipe'}, "
                                   f"but queries would be embedded with {describe_recipe(self.embedding.recipe())}: "
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


def _check_query(query: str, k: int) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"a retrieval query must be a non-empty string, got {query!r}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
