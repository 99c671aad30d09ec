"""BM25Retriever: the index's ranking, as the Retriever API gives it."""
import pytest

from orthrus_rag.indexes.bm25_index import BM25Index
from orthrus_rag.rag import Passage
from orthrus_rag.rag.retriever import BM25Retriever

CORPUS = [Passage("1", "Apple", "A red fruit."), Passage("2", "Pear", "A green fruit."),
          Passage("3", "Loire", "A river in France.")]


async def test_retrieves_the_index_ranking():
    index = BM25Index.build(CORPUS)
    retriever = BM25Retriever(index)
    assert await retriever.retrieve("green fruit", 2) == index.search_text("green fruit", 2)
    usage = await retriever.retrieve_with_usage("river", 5)
    assert [p.id for p in usage.passages] == ["3"] and usage.query_tokens == 0


@pytest.mark.parametrize("query, k", [("", 2), ("  ", 2), ("fruit", 0)])
async def test_rejects_bad_arguments(query, k):
    with pytest.raises(ValueError):
        await BM25Retriever(BM25Index.build(CORPUS)).retrieve(query, k)
