"""A keyword retriever: BM25 over the corpus text, no embedding (indexes/bm25_index.py holds the index)."""
from __future__ import annotations

from typing import Protocol

from orthrus_rag.rag.retriever import Retriever, _check_query
from orthrus_rag.rag.types import Passage


class TextSearchIndex(Protocol):
    """What `BM25Retriever` needs from an index: the k best passages for a query text, best first."""

    def search_text(self, query: str, k: int) -> list[Passage]: ...


class BM25Retriever(Retriever):
    """Scores passages by the query's terms. A query sharing no term with the corpus finds nothing."""

    def __init__(self, index: TextSearchIndex):
        self.index = index

    async def retrieve(self, query: str, k: int) -> list[Passage]:
        _check_query(query, k)
        return self.index.search_text(query, k)
