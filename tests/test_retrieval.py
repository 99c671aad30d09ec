"""Retrieval modes through the stack on a toy corpus with the tiny random embedder: dense, bm25 and hybrid
(the fused ranking equals RRF over the dense and BM25 rankings), caching, and config errors."""
import json

import pytest

from omegaconf import OmegaConf

from orthrus_rag.launch import CONF_DIR
from orthrus_rag.rag import DenseRetriever
from orthrus_rag.rag.retriever import BM25Retriever, HybridRetriever, reciprocal_rank_fusion
from orthrus_rag.retrieval import RetrievalSettings
from orthrus_rag.settings import SettingError, UserError
from orthrus_rag.stack import StackPlan

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
def config(tiny_llama_dir, tiny_encoder_dir):
    def make(folder, pipelines=None, **index):
        cfg = OmegaConf.create({"model": {"name": str(tiny_llama_dir)},
                                "embedder": {**OmegaConf.load(CONF_DIR / "embedder" / "minilm.yaml"),
                                             "name": str(tiny_encoder_dir)},
                                "runtime": {"dtype": "float32"}, "index": {"folder": str(folder), **index}})
        return cfg, pipelines

    return make


def plan(config, corpus, folder, pipelines=None, **index) -> StackPlan:
    cfg, pipelines = config(folder, pipelines, **index)
    return StackPlan.from_config(cfg, corpus, pipelines=pipelines or {}, with_index=True)


@pytest.fixture(scope="module")
async def engine(config, corpus, tmp_path_factory):
    async with plan(config, corpus, tmp_path_factory.mktemp("unused")).start_engine() as engine:
        yield engine


async def test_hybrid_is_rrf_of_dense_and_bm25(engine, config, corpus, tmp_path):
    planned = plan(config, corpus, tmp_path, retrieval="hybrid", rrf_k=60, candidates=10)
    stack = await planned.build(engine)
    indexes, retriever = stack.indexes, stack.retriever
    assert isinstance(retriever, HybridRetriever) and indexes.dense and indexes.bm25
    dense, bm25 = DenseRetriever(engine, indexes.dense, planned.embedding), BM25Retriever(indexes.bm25)
    for query in QUERIES:
        expected = reciprocal_rank_fusion([await dense.retrieve(query, 10), await bm25.retrieve(query, 10)], 5, 60)
        found = await retriever.retrieve_with_usage(query, 5)
        assert found.passages == expected and len(found.passages) == 5 and found.query_tokens > 0
    keyword_only = await retriever.retrieve("castle", 40)
    assert {p.id for p in keyword_only[:3]} <= {p.id for p in await bm25.retrieve("castle", 40)}


async def test_each_mode_loads_only_its_indexes_and_caches_them(engine, config, corpus, tmp_path):
    only_bm25 = await plan(config, corpus, tmp_path, retrieval="bm25").build(engine)
    assert only_bm25.indexes.dense is None and isinstance(only_bm25.retriever, BM25Retriever)
    assert not (tmp_path / "manifest.json").exists() and (tmp_path / "bm25" / "bm25.json").is_file()
    stamp = (tmp_path / "bm25" / "bm25.json").stat().st_mtime_ns
    only_dense = await plan(config, corpus, tmp_path, retrieval="dense").build(engine)
    assert only_dense.indexes.bm25 is None and type(only_dense.retriever) is DenseRetriever
    await plan(config, corpus, tmp_path, retrieval="hybrid").build(engine)
    assert (tmp_path / "bm25" / "bm25.json").stat().st_mtime_ns == stamp  # found cached, not rebuilt


async def test_pipelines_get_the_mode_through_the_stack(engine, config, corpus, tmp_path):
    pipelines = {"standard_rag": {"k": 3, "max_tokens": 2}, "no_retrieval": {"max_tokens": 2}}
    stack = await plan(config, corpus, tmp_path, pipelines, retrieval="hybrid").build(engine)
    answer = await stack.pipelines["standard_rag"].answer(QUERIES[0])
    assert answer.passages == await stack.retriever.retrieve(QUERIES[0], 3)
    assert stack.pipelines["standard_rag"].retriever is stack.retriever is stack.pipelines["no_retrieval"].retriever


def test_unknown_mode_is_a_one_line_setting_error(config, corpus, tmp_path):
    with pytest.raises(SettingError) as error:
        plan(config, corpus, tmp_path, retrieval="sparse")
    assert str(error.value) == "index.retrieval: expected 'dense' or 'bm25' or 'hybrid', got 'sparse'"


@pytest.mark.parametrize("settings, message", [({"candidates": 0}, "index.candidates must be >= 1, got 0"),
                                               ({"rrf_k": -1}, "index.rrf_k must be >= 0, got -1")])
def test_bad_fusion_settings_are_user_errors(config, corpus, tmp_path, settings, message):
    with pytest.raises(UserError, match=message):
        plan(config, corpus, tmp_path, retrieval="hybrid", **settings)


def test_the_index_group_takes_its_retrieval_defaults_from_the_settings():
    from orthrus_rag.index_plan import IndexSpec

    spec = IndexSpec()
    assert RetrievalSettings() == RetrievalSettings("hybrid", 60, 15)
    assert (spec.retrieval, spec.rrf_k, spec.candidates) == ("hybrid", 60, 15)


async def test_the_servers_index_group_reaches_the_retriever(engine, config, corpus, tmp_path):
    from orthrus_rag.serving.rag_service import build_rag

    pipelines = {"standard_rag": {"k": 3, "max_tokens": 2, "num_demos": 0}}
    answer = await (await build_rag(engine, plan(config, corpus, tmp_path, pipelines, retrieval="bm25"),
                                    "standard_rag"))(QUERIES[0], None)
    indexes = (await plan(config, corpus, tmp_path, retrieval="bm25").build(engine)).indexes
    assert answer.passages == await BM25Retriever(indexes.bm25).retrieve(QUERIES[0], 3)
    assert not (tmp_path / "manifest.json").exists()  # bm25 alone: no dense index built
