"""The rag workload end to end on the tiny random models and the demo set (hetero and alternating), the backends
standing in for the engine, and the Hydra config it is driven by."""
import asyncio
import json
from dataclasses import replace

import numpy as np
import pytest

from orthrus_rag.eval.bench.backends import EngineBackend, HFBackend
from orthrus_rag.eval.bench.rag import LoggedBackend, RagSetup, RagWorkload, run_rag_bench
from orthrus_rag.eval.experiment.datasets import load_questions
from orthrus_rag.eval.load.arrivals import arrival_offsets
from orthrus_rag.eval.bench.report import write_rag_reports
from orthrus_rag.indexes import load_corpus
from orthrus_rag.demo import demo_corpus_path, demo_questions_path
from orthrus_rag.engine import AsyncEngine, EngineConfig, EngineLike, PoolingParams, SamplingParams
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.retrieval import RetrievalSettings
from orthrus_rag.index_plan import IndexSource
from orthrus_rag.stack import StackPlan

IRCOT = {"name": "ircot", "k": 2, "max_steps": 2, "max_passages": 4, "num_demos": 1, "passage_words": 20,
         "max_tokens": 4}


def tiny(generator, embedder) -> EngineConfig:
    return EngineConfig(generator=str(generator), embedder=str(embedder), dtype="float32",
                        max_num_batched_tokens=256, block_size=4, num_kv_blocks=1024)


@pytest.fixture(scope="module")
def setup(tiny_llama_dir, tiny_encoder_dir, tmp_path_factory):
    questions = load_questions(demo_questions_path(), "all", 3)
    passages = load_corpus(demo_corpus_path())
    index = IndexSource(tmp_path_factory.mktemp("index"), passages, "tiny-encoder", retrieval=RetrievalSettings("dense"))
    workload = RagWorkload(slo_s=5.0, warmup_questions=1, sample_interval_s=0.05, seed=3)
    plan = StackPlan(tiny(tiny_llama_dir, tiny_encoder_dir), EmbeddingRecipe(), index, {"ircot": IRCOT})
    return RagSetup(plan, questions, workload)


def test_rag_bench_end_to_end(setup, tmp_path):
    bench = run_rag_bench(setup, [None, 20.0], ["hetero", "alternating"])
    bench = json.loads(json.dumps(bench))  # what bench.json holds
    assert bench["workload"] == "rag" and [e["load"] for e in bench["sweep"]] == ["closed C=8", "rate 20/s"]
    assert bench["headline"] == {"p99": "rate 20/s", "qps": "closed C=8"}
    for entry in bench["sweep"]:
        hetero, alternating = entry["modes"]["hetero"], entry["modes"]["alternating"]
        for r in (hetero, alternating):
            assert r["n"] == 3 and 0 < r["p50_s"] <= r["p90_s"] <= r["p99_s"] <= r["wall_s"]
            assert r["qps"] == pytest.approx(3 / r["wall_s"])
            assert r["calls"]["embed"]["n"] >= 3 and r["calls"]["generate"]["n"] >= 3
            assert r["calls"]["generate"]["ttft_p50_s"] > 0
            assert 0 <= r["time_share"]["idle"] <= 1 and r["time_share"]["steps"] > 0
            assert sum(r["engine"]["tokens"].values()) > 0 and r["timeline"]
            if r["engine"]["preemptions"] == 0:  # every prompt token the engine ran, and no other, is counted
                assert r["prompt_tokens"]["computed_per_question"] * 3 == r["engine"]["tokens"]["prefill"]
        assert alternating["engine"]["mixed_steps"] == 0
        assert hetero["predictions"] == alternating["predictions"]  # greedy, fp32: same answers
        assert hetero["acc"] == alternating["acc"]
        assert entry["ratios"]["same_predictions_alternating"] == 1.0
        assert entry["ratios"]["p99_reduction_vs_alternating"] == pytest.approx(
            1 - hetero["p99_s"] / alternating["p99_s"])
        assert entry["ratios"]["p99_reduction_vs_isolated"] is None
    closed, open_ = (bench["sweep"][i]["modes"]["hetero"]["engine"]["tokens"]["prefill"] for i in (0, 1))
    assert open_ > 0.5 * closed  # a fresh engine per load: the same prompts are not found cached
    offsets = arrival_offsets(3, 20.0, 1.0, 3)
    assert bench["sweep"][1]["modes"]["hetero"]["wall_s"] >= offsets[-1]  # the last question arrived in the run
    assert set(bench["modes"]["hetero"]) >= {"qps", "p50_s", "p90_s", "p99_s", "acc"}
    assert "latencies_s" not in bench["modes"]["hetero"]
    paths = write_rag_reports(bench, tmp_path)
    assert {"bench", "table", "latency_cdf", "step_composition"} <= set(paths)
    assert all(p.stat().st_size > 0 for p in paths.values())


def test_backends_stand_in_for_the_engine(tiny_llama_dir, tiny_encoder_dir):
    """EngineBackend and HFBackend answer as the engine does: vectors, text, usage, timings; greedy text agrees."""
    config = tiny(tiny_llama_dir, tiny_encoder_dir)
    params = SamplingParams(max_tokens=5, stop=["\n"])

    async def ask(backend):
        emb = await backend.embed("Where is Vostrick?", PoolingParams())
        gen = await backend.generate("The river of Vostrick is", params)
        return emb, gen

    outs = {}
    for name, cls in (("engine", EngineBackend), ("hf", HFBackend)):
        backend = cls(config, SamplingParams(), PoolingParams())
        try:
            outs[name] = asyncio.run(ask(backend))
            assert isinstance(backend, EngineLike) and isinstance(LoggedBackend(backend), EngineLike)
            assert name == "hf" or isinstance(backend, AsyncEngine)  # EngineLike above: the AsyncEngine itself
            assert set(backend.stats()) and backend.stats() == asyncio.run(backend.settled_stats())
            assert backend.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
        finally:
            backend.close()
    for emb, gen in outs.values():
        assert emb.embedding.dtype == np.float32 and emb.embedding.ndim == 1 and emb.num_tokens > 0
        assert gen.usage.prompt_tokens > 0 and 1 <= gen.usage.completion_tokens <= 5
        assert "\n" not in gen.text and gen.timings.finished >= gen.timings.arrival
    np.testing.assert_allclose(outs["engine"][0].embedding, outs["hf"][0].embedding, atol=1e-4)
    assert outs["engine"][1].text == outs["hf"][1].text


def test_hf_backend_embeds_backbone_rows_through_the_adapter_as_the_engine_does(tiny_llama_dir, lora_dir):
    config = replace(tiny(tiny_llama_dir, tiny_llama_dir), embedder=None, embedding_adapter=str(lora_dir))
    text = "Where is the river of Vostrick, and who named it?"

    async def embed(backend, params):
        return (await backend.embed(text, params)).embedding

    vectors = {}
    for name, cls in (("engine", EngineBackend), ("hf", HFBackend)):
        backend = cls(config, SamplingParams(), PoolingParams(model="backbone"))
        try:
            vectors[name] = [asyncio.run(embed(backend, PoolingParams(model="backbone", truncate=cut)))
                             for cut in (None, 4)]
        finally:
            backend.close()
    for whole_or_cut in range(2):
        np.testing.assert_allclose(vectors["engine"][whole_or_cut], vectors["hf"][whole_or_cut], atol=1e-5)
    assert np.abs(vectors["hf"][0] - vectors["hf"][1]).max() > 1e-3  # the cut changes the vector


def test_rag_config_composes():
    from hydra import compose, initialize_config_dir

    from orthrus_rag.eval.bench.cli import rag_rates
    from orthrus_rag.launch import CONF_DIR, UserError

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        one = compose("bench", overrides=["workload=rag", "pipeline=standard_rag", "dataset=2wiki", "rate=0.3"])
        sweep = compose("bench", overrides=["workload=rag", "rates=[null,0.1,0.2]"])
        bad = compose("bench", overrides=["workload=rag", "rate=-1"])
    assert one.workload.name == "rag" and one.pipeline.name == "standard_rag" and one.dataset.name == "2wiki"
    assert one.index.factory and rag_rates(one) == [0.3]
    assert sweep.pipeline.name == "ircot" and rag_rates(sweep) == [None, 0.1, 0.2]
    with pytest.raises(UserError, match="rates"):
        rag_rates(bad)


def test_hf_counters_are_deltas():
    from orthrus_rag.eval.bench.runner import engine_delta

    before = {"generate_batches": 3, "embed_batches": 2, "generate_s": 10.0, "embed_s": 1.0}
    after = {"generate_batches": 5, "embed_batches": 2, "generate_s": 14.5, "embed_s": 1.25}
    assert engine_delta(after, before) == {"generate_batches": 2, "embed_batches": 0, "generate_s": 4.5,
                                           "embed_s": 0.25}
