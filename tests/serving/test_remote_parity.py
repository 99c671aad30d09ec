"""A pipeline's engine on another server (RemoteEngine over orthrus-rag-serve) computes what the local engine does:
the same greedy text and token counts, the same vectors, the same predictions of a whole run and of /v1/rag."""
from __future__ import annotations

import json

import numpy as np

from orthrus_rag.cli.run import main
from orthrus_rag.engine import PoolingParams, SamplingParams
from orthrus_rag.rag.remote import Endpoint, EndpointSettings, RemoteEngine
from orthrus_rag.serving.rag_service import build_rag
from tests.serving.conftest import rag_plan

PROMPTS = ["The capital of the invented country is", "Passage: rivers run to the sea.\nQuestion: where?\nAnswer:"]


def remote_over(server, local=None) -> RemoteEngine:
    settings = EndpointSettings(server.api)
    generator = Endpoint(settings, server.state.generator_name)
    embedder = Endpoint(settings, server.state.embedder_name)
    return RemoteEngine(server.engine.tokenizer, generator, embedder, local)


async def test_greedy_text_and_usage_equal_the_engine(server):
    remote = remote_over(server)
    for prompt in PROMPTS:
        params = SamplingParams(max_tokens=12, stop=["\n\n"])
        want, got = await server.engine.generate(prompt, params), await remote.generate(prompt, params)
        assert (got.text, got.usage.prompt_tokens, got.usage.completion_tokens) == \
            (want.text, want.usage.prompt_tokens, want.usage.completion_tokens)


async def test_vectors_equal_the_engine(server):
    remote = remote_over(server)
    for text in ["a passage about rivers", "query: where do rivers run"]:
        want, got = await server.engine.embed(text, PoolingParams()), await remote.embed(text, PoolingParams())
        np.testing.assert_allclose(got.embedding, want.embedding, rtol=0, atol=1e-6)
        assert got.num_tokens == want.num_tokens


def test_a_run_with_model_endpoint_predicts_as_the_local_run(server, run_app, tiny_models, tmp_path):
    small = ["dataset.limit=4", "pipeline.max_tokens=6", "pipeline.num_demos=0", "pipeline.max_steps=2",
             "pipeline.reader_num_demos=0", "concurrency=2"]
    for name, extra in (("local", []), ("remote", [f"model.endpoint={server.api}", f"embedder.endpoint={server.api}"])):
        run_app(main, "orthrus-rag", *tiny_models, *small, *extra, f"hydra.run.dir={tmp_path / name}")
    rows = {name: [json.loads(line) for line in (tmp_path / name / "predictions.jsonl").read_text().splitlines()]
            for name in ("local", "remote")}
    assert [(r["id"], r["prediction"], r["passages"]) for r in rows["remote"]] == \
        [(r["id"], r["prediction"], r["passages"]) for r in rows["local"]]
    remote = json.loads((tmp_path / "remote" / "results.json").read_text())["engine"]["remote"]
    assert remote["generator"]["requests"] > 0 and remote["embedder"]["requests"] > 0


async def test_rag_over_a_remote_model_answers_as_over_the_local_engine(server, tmp_path):
    """What orthrus-rag-serve with model.endpoint and embedder.endpoint runs for /v1/rag: the pipelines and the
    index build over RemoteEngine, its local engine left to the OpenAI routes."""
    pipelines = {"standard_rag": {"k": 3, "max_tokens": 6, "num_demos": 0}}
    question = "Which river flows through the capital?"
    local = await build_rag(server.engine, rag_plan(server.engine.config, tmp_path / "local", pipelines),
                            "standard_rag")
    remote_engine = remote_over(server, local=server.engine)
    remote = await build_rag(remote_engine, rag_plan(server.engine.config, tmp_path / "remote", pipelines),
                             "standard_rag")
    want, got = await local(question, None), await remote(question, None)
    assert (got.prediction, [p.id for p in got.passages]) == (want.prediction, [p.id for p in want.passages])
    counts = remote_engine.stats()["remote"]
    assert counts["generator"]["requests"] >= 1 and counts["embedder"]["requests"] > 3  # the index was built there
