"""Retrieval modes through the stack on a toy corpus with the tiny random embedder: dense, bm25 and hybrid
(the fused ranking equals RRF over the dense and BM25 rankings), caching, and config errors."""
import json

import pytest

from orthrus_rag.engine import AsyncEngine, EngineConfig, PoolingParams
from orthrus_rag.rag import DenseRetriever
from orthrus_rag.rag.bm25_retriever import BM25Retriever
from orthrus_rag.rag.fusion import reciprocal_rank_fusion
from orthrus_rag.rag.hybrid_retriever import HybridRetriever
from orthrus_rag.retrieval import RetrievalSettings, SearchIndexes, make_retriever
from orthrus_rag.stack import IndexSpec, SettingError, UserError, index_source, load_index, rag_pipeline, typed

WORDS = "river king city queen film band novel bridge castle mountain lake island painter poet".split()
QUERIES = ["Which king built the castle?", "A film about a river", "poet of the island", "zzz unknown words"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "toy.jsonl"
    rows = [{"id": f"p{i}", "title": f"{WORDS[i % 14].title()} {i}",
             "text": f"The {WORDS[i % 14]} and the {WORDS[(3 * i + 1) % 14]} of place {i}."} for i in range(40)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
async def engine(tiny_llama_dir, tiny_encoder_dir):
    config = EngineConfig(generator=str(tiny_llama_dir), embedder=str(tiny_encoder_dir), dtype="float32")
    async with AsyncEngine(config) as engine:
        yield engine


def source(corpus, folder, **settings):
    return index_source(IndexSpec(folder=str(folder), **settings), corpus, "tiny-encoder")


async def test_hybrid_is_rrf_of_dense_and_bm25(engine, corpus, tmp_path):
    pooling = PoolingParams()
    indexes = await load_index(engine, source(corpus, tmp_path, retrieval="hybrid", rrf_k=60, candidates=10), pooling)
    retriever = make_retriever(engine, indexes, pooling)
    assert isinstance(retriever, HybridRetriever) and indexes.dense and indexes.bm25
    dense, bm25 = DenseRetriever(engine, indexes.dense, pooling), BM25Retriever(indexes.bm25)
    for query in QUERIES:
        expected = reciprocal_rank_fusion([await dense.retrieve(query, 10), await bm25.retrieve(query, 10)], 5, 60)
        found = await retriever.retrieve_with_usage(query, 5)
        assert found.passages == expected and len(found.passages) == 5 and found.query_tokens > 0
    keyword_only = await retriever.retrieve("castle", 40)
    assert {p.id for p in keyword_only[:3]} <= {p.id for p in await bm25.retrieve("castle", 40)}


async def test_each_mode_loads_only_its_indexes_and_caches_them(engine, corpus, tmp_path):
    pooling = PoolingParams()
    only_bm25 = await load_index(engine, source(corpus, tmp_path, retrieval="bm25"), pooling)
    assert only_bm25.dense is None and isinstance(make_retriever(engine, only_bm25, pooling), BM25Retriever)
    assert not (tmp_path / "manifest.json").exists() and (tmp_path / "bm25" / "bm25.json").is_file()
    stamp = (tmp_path / "bm25" / "bm25.json").stat().st_mtime_ns
    only_dense = await load_index(engine, source(corpus, tmp_path), pooling)
    assert only_dense.bm25 is None and type(make_retriever(engine, only_dense, pooling)) is DenseRetriever
    await load_index(engine, source(corpus, tmp_path, retrieval="hybrid"), pooling)
    assert (tmp_path / "bm25" / "bm25.json").stat().st_mtime_ns == stamp  # found cached, not rebuilt


async def test_pipelines_get_the_mode_through_the_stack(engine, corpus, tmp_path):
    pooling = PoolingParams()
    indexes = await load_index(engine, source(corpus, tmp_path, retrieval="hybrid"), pooling)
    pipeline = rag_pipeline({"name": "standard_rag", "k": 3, "max_tokens": 2}, engine, indexes, pooling)
    answer = await pipeline.answer(QUERIES[0])
    assert answer.passages == await make_retriever(engine, indexes, pooling).retrieve(QUERIES[0], 3)
    bare = rag_pipeline({"name": "standard_rag", "k": 3}, engine, indexes.dense, pooling)  # a bare dense index
    assert type(bare.retriever) is DenseRetriever


def test_unknown_mode_is_a_one_line_setting_error():
    with pytest.raises(SettingError) as error:
        typed(IndexSpec, {"retrieval": "sparse"}, "index")
    assert str(error.value) == "index.retrieval: expected 'dense' or 'bm25' or 'hybrid', got 'sparse'"


@pytest.mark.parametrize("settings, message", [({"candidates": 0}, "index.candidates must be >= 1, got 0"),
                                               ({"rrf_k": -1}, "index.rrf_k must be >= 0, got -1")])
def test_bad_fusion_settings_are_user_errors(corpus, tmp_path, settings, message):
    with pytest.raises(UserError, match=message):
        source(corpus, tmp_path, retrieval="hybrid", **settings)


def test_settings_default_to_dense():
    assert SearchIndexes(None).settings == RetrievalSettings("dense", 60, 15)


async def test_the_servers_rag_settings_reach_the_retriever(engine, corpus, tmp_path):
    from orthrus_rag.serving.rag_service import build_rag
    from orthrus_rag.serving.settings import RagSettings

    settings = RagSettings(corpus=str(corpus), index_cache=str(tmp_path), retrieval="bm25",
                           pipelines={"standard_rag": {"k": 3, "max_tokens": 2, "num_demos": 0}})
    answer = await (await build_rag(engine, settings, "tiny-encoder", PoolingParams()))(QUERIES[0], None)
    indexes = await load_index(engine, source(corpus, tmp_path, retrieval="bm25"), PoolingParams())
    assert answer.passages == await BM25Retriever(indexes.bm25).retrieve(QUERIES[0], 3)
    assert not (tmp_path / "manifest.json").exists()  # bm25 alone: no dense index built
