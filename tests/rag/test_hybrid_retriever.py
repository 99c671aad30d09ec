"""HybridRetriever over scripted retrievers: how deep each side ranks, the fused order, token usage."""
import pytest

from orthrus_rag.rag import Passage, Retrieval, Retriever
from orthrus_rag.rag.retriever import HybridRetriever


class Scripted(Retriever):
    def __init__(self, ids, tokens=0):
        self.ids, self.tokens, self.asked = ids, tokens, []

    async def retrieve(self, query, k):
        return (await self.retrieve_with_usage(query, k)).passages

    async def retrieve_with_usage(self, query, k):
        self.asked.append((query, k))
        return Retrieval([Passage(i, i, "") for i in self.ids[:k]], self.tokens)


async def test_fuses_candidates_from_each_side():
    dense, keyword = Scripted(["a", "b", "c", "d"], tokens=7), Scripted(["d", "c", "e"])
    hybrid = HybridRetriever([dense, keyword], rrf_k=60, candidates=3)
    result = await hybrid.retrieve_with_usage("q", 2)
    # a: 1/61; b: 1/62; c: 1/63 + 1/62; d: 1/61 (keyword only, 4th in dense is beyond 3 candidates)
    assert [p.id for p in result.passages] == ["c", "a"] and result.query_tokens == 7
    assert result.passages[0].score == pytest.approx(1 / 63 + 1 / 62)
    assert dense.asked == keyword.asked == [("q", 3)]
    await hybrid.retrieve("q", 5)  # k above candidates: each side ranks k
    assert dense.asked[-1] == ("q", 5)
    assert [p.id for p in await hybrid.retrieve("q", 5)] == ["d", "c", "a", "b", "e"]


@pytest.mark.parametrize("kwargs", [{"rrf_k": -1}, {"candidates": 0}])
def test_bad_settings(kwargs):
    with pytest.raises(ValueError):
        HybridRetriever([Scripted([])], **kwargs)


async def test_bad_query():
    with pytest.raises(ValueError):
        await HybridRetriever([Scripted(["a"])]).retrieve(" ", 1)
