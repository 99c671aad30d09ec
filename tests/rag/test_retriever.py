from dataclasses import dataclass

import numpy as np
import pytest

from orthrus_rag.engine import PoolingParams
from orthrus_rag.rag import DenseRetriever, Passage
from orthrus_rag.rag.embedding import EmbeddingRecipe


@dataclass
class FakeEmbedOutput:
    embedding: np.ndarray
    num_tokens: int


class FakeEngine:
    def __init__(self):
        self.calls = []

    async def embed(self, text, params):
        self.calls.append((text, params))
        return FakeEmbedOutput(np.array([len(text), 1.0, 0.0], dtype=np.float32), num_tokens=len(text.split()))


class FakeIndex:
    def __init__(self):
        self.calls = []

    def search(self, query_vectors, k):
        self.calls.append((query_vectors.copy(), k))
        return [[Passage(f"p{i}", f"T{i}", "x", score=float(-i)) for i in range(k)] for _ in query_vectors]


async def test_dense_retriever_embeds_then_searches_one_row():
    engine, index = FakeEngine(), FakeIndex()
    pooling = PoolingParams(pooling="mean", model="backbone")
    retriever = DenseRetriever(engine, index, EmbeddingRecipe(pooling))
    found = await retriever.retrieve("who wrote it", 3)
    assert [p.id for p in found] == ["p0", "p1", "p2"]
    assert engine.calls == [("who wrote it", pooling)]
    vectors, k = index.calls[0]
    assert k == 3 and vectors.shape == (1, 3) and vectors.dtype == np.float32
    assert vectors[0, 0] == len("who wrote it")


async def test_dense_retriever_reports_query_tokens():
    retriever = DenseRetriever(FakeEngine(), FakeIndex())
    result = await retriever.retrieve_with_usage("a b c", 2)
    assert result.query_tokens == 3 and len(result.passages) == 2
    assert retriever.embedding == EmbeddingRecipe(PoolingParams())


@pytest.mark.parametrize("query, k", [("", 2), ("   ", 2), ("q", 0)])
async def test_dense_retriever_rejects_bad_arguments(query, k):
    with pytest.raises(ValueError):
        await DenseRetriever(FakeEngine(), FakeIndex()).retrieve(query, k)


async def test_dense_retriever_puts_the_query_prefix_first():
    from orthrus_rag.rag.embedding import EmbeddingRecipe

    engine, params = FakeEngine(), EmbeddingRecipe(PoolingParams(model="backbone"), query_prefix="query: ", passage_prefix="p: ")
    await DenseRetriever(engine, FakeIndex(), params).retrieve("who wrote it", 1)
    assert engine.calls == [("query: who wrote it", params.params)]


def test_dense_retriever_refuses_an_index_embedded_another_way():
    from types import SimpleNamespace

    from orthrus_rag.rag.embedding import EmbeddingRecipe
    from orthrus_rag.rag.retriever import IndexRecipeError

    params = EmbeddingRecipe(PoolingParams(model="backbone"), query_prefix="query: ", adapter="x@1")
    index = FakeIndex()
    index.manifest = SimpleNamespace(embedding=params.recipe())
    DenseRetriever(FakeEngine(), index, params)  # the same recipe: accepted
    for other in (EmbeddingRecipe(PoolingParams(model="backbone", pooling="last"), query_prefix="query: ", adapter="x@1"),
                  EmbeddingRecipe(PoolingParams(model="backbone"), adapter="x@1"),
                  EmbeddingRecipe(PoolingParams(model="backbone"), query_prefix="query: "),
                  EmbeddingRecipe(PoolingParams(model="backbone"), query_prefix="query: ", adapter="x@1", passage_max_tokens=64)):
        with pytest.raises(IndexRecipeError, match="rebuild the index"):
            DenseRetriever(FakeEngine(), index, other)


def test_recipe_names_passage_max_tokens_only_when_passages_are_cut():
    from orthrus_rag.rag.embedding import EmbeddingRecipe

    whole, cut = EmbeddingRecipe(PoolingParams(model="backbone")), EmbeddingRecipe(PoolingParams(model="backbone"), passage_max_tokens=64)
    assert "passage_max_tokens" not in whole.recipe() and cut.recipe()["passage_max_tokens"] == 64
    assert cut.for_passages().truncate == 64 and cut.params.truncate is None  # queries are embedded whole
