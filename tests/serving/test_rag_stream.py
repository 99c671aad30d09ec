"""The streamed /v1/rag (server-sent trace events), the example and pipeline listings and the engine's step feed,
over the tiny models (float32, greedy: answers are deterministic)."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, EngineReasoner, Pipeline
from orthrus_rag.rag.testing import ScriptedRetriever
from orthrus_rag.serving import ServerSettings
from orthrus_rag.serving.rag_service import RagService
from orthrus_rag.serving.rag_stream import rag_events
from orthrus_rag.serving.settings import RagSettings
from orthrus_rag.pipelines import IRCoT, StandardRAG


class Slow(Pipeline):
    """Generates 20 x 400 tokens: long enough to hang up on, or to run past a deadline."""

    async def answer(self, question: str) -> Answer:
        for _ in range(20):
            text = await self.reason(question, SamplingParams(max_tokens=400, ignore_eos=True))
        return Answer(question, text)


class Failing(Pipeline):
    async def answer(self, question: str) -> Answer:
        raise RuntimeError("the index is gone")


class TimingOut(Pipeline):
    async def answer(self, question: str) -> Answer:
        raise TimeoutError("the index did not answer in time")


def served_pipelines(engine) -> dict[str, Pipeline]:
    reasoner = EngineReasoner(engine)
    return {"standard_rag": StandardRAG(ScriptedRetriever(), reasoner, k=2, num_demos=0, max_tokens=8),
            "ircot": IRCoT(ScriptedRetriever(), reasoner, k=2, max_steps=3, num_demos=0, reader_num_demos=0,
                           max_tokens=8, reader_max_tokens=8),
            "slow": Slow(None, reasoner), "failing": Failing(None, None),
            "timing_out": TimingOut(None, None)}


@pytest.fixture(scope="module")
def rag_server(serve_app, engine):
    rag = RagService(served_pipelines(engine), "ircot")
    settings = ServerSettings(rag=RagSettings(pipeline="ircot", pipelines={name: {} for name in rag.pipelines}),
                              max_concurrent_per_key=1)
    with serve_app(engine, settings, rag) as running:
        yield running


def events(url: str, body: dict) -> list[dict | str]:
    """The streamed events of one /v1/rag request, `[DONE]` included."""
    with httpx.stream("POST", f"{url}/v1/rag", json={**body, "stream": True}, timeout=120) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        return [_data(line) for line in resp.iter_lines() if line.startswith("data:")]


def _data(line: str) -> dict | str:
    data = line.removeprefix("data: ")
    return data if data == "[DONE]" else json.loads(data)


def test_events_come_in_order_and_end_with_the_plain_answer(rag_server):
    body = {"question": "Where was the founder of Kestrel Works born?", "pipeline": "ircot"}
    plain = httpx.post(f"{rag_server.url}/v1/rag", json=body, timeout=120).json()
    streamed = events(rag_server.url, body)
    assert streamed[0] == {"type": "start", "question": body["question"], "pipeline": "ircot"}
    assert streamed[-1] == "[DONE]" and streamed[-2]["type"] == "answer"
    final = streamed[-2]
    assert (final["answer"], final["passages"]) == (plain["answer"], plain["passages"])
    same = ("kind", "input", "output", "prompt_tokens", "completion_tokens")
    assert [{k: e[k] for k in same} for e in final["trace"]] == [{k: e[k] for k in same} for e in plain["trace"]]
    calls = [e for e in streamed[1:-2]]
    for number in range(len(final["trace"])):
        own = [e["type"] for e in calls if e["call"] == number]
        assert own[0] == "call_start" and own[-1] in ("retrieval", "reasoning") and len(own) - 2 == own.count("text")
    reasonings = [e for e in calls if e["type"] == "reasoning"]
    assert reasonings and all(r["text"] == "".join(e["text"] for e in calls if e["type"] == "text"
                                                      and e["call"] == r["call"]) for r in reasonings)
    retrievals = [e for e in calls if e["type"] == "retrieval"]
    assert retrievals[0]["query"] == body["question"] and len(retrievals[0]["passages"]) == 2
    assert {"title", "score", "text"} <= retrievals[0]["passages"][0].keys()
    timeline = final["timeline"]
    assert timeline["prefill_s"] > 0 and timeline["decode_s"] > 0
    assert timeline["total_s"] == pytest.approx(sum(v for k, v in timeline.items() if k != "total_s"), abs=0.02)


def test_an_example_is_scored_as_the_evaluation_scores_it(rag_server):
    streamed = events(rag_server.url, {"question": "Where was the founder of Kestrel Works born?",
                                       "pipeline": "standard_rag", "example": "demo:demo-q01"})
    score = streamed[-2]["score"]
    assert score["gold"] == "Vostrick" and score["gold_titles"] == ["Kestrel Works", "Ida Brenn"]
    assert score["em"] == score["acc"] == 0.0 and score["found_titles"] == [] and score["recall"] == 0.0
    wrong = httpx.post(f"{rag_server.url}/v1/rag", json={"question": "q", "stream": True, "example": "demo:nope"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "example"


def test_k_and_max_steps_apply_to_one_request_only(rag_server):
    streamed = events(rag_server.url, {"question": "Which river?", "pipeline": "ircot", "k": 1, "max_steps": 1})
    retrievals = [e for e in streamed if isinstance(e, dict) and e["type"] == "retrieval"]
    assert [len(e["passages"]) for e in retrievals] == [1]
    assert len([e for e in streamed if isinstance(e, dict) and e["type"] == "reasoning"]) <= 2  # a step, the reader
    plain = httpx.post(f"{rag_server.url}/v1/rag", json={"question": "Which river?", "pipeline": "standard_rag"},
                       timeout=120).json()
    assert len(plain["passages"]) == 2
    refused = httpx.post(f"{rag_server.url}/v1/rag", json={"question": "q", "k": 0})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "k"


def test_hanging_up_aborts_the_engine_requests(rag_server):
    engine = rag_server.engine
    decoded = engine.stats()["tokens"]["decode"]
    with httpx.stream("POST", f"{rag_server.url}/v1/rag", timeout=60,
                      json={"question": "Count with me", "pipeline": "slow", "stream": True}) as resp:
        lines = resp.iter_lines()
        assert next(json.loads(line[6:]) for line in lines if '"type":"text"' in line)
    assert _until(lambda: engine.stats()["running"] == 0 and engine.stats()["kv_blocks_used"] == 0)
    assert engine.stats()["tokens"]["decode"] - decoded < 350, "the generation ran on after the client left"


def test_failures_and_deadlines_end_the_stream_with_an_error_event(rag_server):
    failed = events(rag_server.url, {"question": "q", "pipeline": "failing"})
    assert failed[-2]["type"] == "error" and failed[-2]["error"]["code"] == "internal_error"
    late = events(rag_server.url, {"question": "Count with me", "pipeline": "slow", "timeout": 1.0})
    assert late[-2]["type"] == "error" and late[-2]["error"]["code"] == "request_timeout" and late[-1] == "[DONE]"
    assert _until(lambda: rag_server.engine.stats()["running"] == 0)
    unknown = events(rag_server.url, {"question": "q", "pipeline": "nope"})
    assert unknown[-2]["type"] == "error" and unknown[-2]["error"]["param"] == "pipeline"


def test_a_pipeline_timing_out_on_its_own_is_a_failure_not_the_deadline(rag_server):
    for limit in ({}, {"timeout": 60.0}):
        failed = events(rag_server.url, {"question": "q", "pipeline": "timing_out", **limit})
        assert failed[-2]["type"] == "error" and failed[-2]["error"]["code"] == "internal_error", limit
        assert failed[-1] == "[DONE]"


async def test_closing_the_stream_after_its_start_stops_the_pipeline():
    started, stopped = asyncio.Event(), asyncio.Event()

    async def answer() -> Answer:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise

    stream = rag_events(answer, "q", "slow", None, None)
    assert (await anext(stream))["type"] == "start"
    await started.wait()
    await stream.aclose()
    await asyncio.sleep(0)
    assert stopped.is_set()


def test_the_step_feed_reads_after_an_id_and_is_never_refused(rag_server):
    httpx.post(f"{rag_server.url}/v1/rag", json={"question": "Which river?"}, timeout=120).raise_for_status()
    first = httpx.get(f"{rag_server.url}/v1/engine/steps", params={"limit": 5}).json()["replicas"]
    assert [r["replica"] for r in first] == ["engine"] and 0 < len(first[0]["steps"]) <= 5
    last = first[0]["steps"][-1]
    assert {"decode", "prefill", "embed"} == last["tokens"].keys() and last["kv_blocks_total"] > 0
    with httpx.stream("POST", f"{rag_server.url}/v1/rag", timeout=60,
                      json={"question": "Count", "pipeline": "slow", "stream": True}) as resp:
        lines = resp.iter_lines()  # kept: a dropped iterator closes the connection
        next(line for line in lines if '"type":"text"' in line)
        busy = httpx.post(f"{rag_server.url}/v1/rag", json={"question": "q"})
        assert busy.status_code == 429  # max_concurrent_per_key=1 ...
        newer = httpx.get(f"{rag_server.url}/v1/engine/steps", params={"since": last["id"]})
        assert newer.status_code == 200  # ... but the feed is not counted
        assert all(s["id"] > last["id"] for s in newer.json()["replicas"][0]["steps"])
        assert newer.json()["replicas"][0]["steps"]
        for listing in ("/v1/rag/pipelines", "/v1/rag/examples", "/v1/models"):  # what the page loads first
            assert httpx.get(f"{rag_server.url}{listing}").status_code == 200, listing


def test_pipelines_and_examples_are_listed(rag_server):
    listed = httpx.get(f"{rag_server.url}/v1/rag/pipelines").json()
    assert listed["default"] == "ircot" and {p["name"] for p in listed["pipelines"]} >= {"ircot", "standard_rag"}
    ircot = next(p for p in listed["pipelines"] if p["name"] == "ircot")
    assert (ircot["settings"]["k"], ircot["settings"]["max_steps"]) == (2, 3)
    examples = httpx.get(f"{rag_server.url}/v1/rag/examples").json()
    assert examples["sources"] == ["demo"] and len(examples["data"]) == 30
    assert examples["data"][0]["id"] == "demo:demo-q01"
    assert httpx.get(f"{rag_server.url}/v1/rag/examples", params={"source": "dataset"}).status_code == 400


def test_the_page_and_its_files_are_served_and_the_stream_is_documented(rag_server):
    page = httpx.get(f"{rag_server.url}/")
    assert page.status_code == 200 and "src=\"/web/app.js\"" in page.text
    module = httpx.get(f"{rag_server.url}/web/app.js")
    assert module.status_code == 200 and module.headers["cache-control"] == "no-cache"
    schema = httpx.get(f"{rag_server.url}/openapi.json").json()
    stream = schema["paths"]["/v1/rag"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    refs = json.dumps(stream)
    assert all(f"#/components/schemas/{name}" in refs for name in ("Retrieved", "Reasoned", "TextDelta",
                                                                   "AnswerEvent", "ErrorEvent"))
    assert "Passage" in schema["components"]["schemas"]


def test_a_dataset_given_at_start_is_offered_beside_the_demo_set(serve_app, engine, tmp_path):
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "answer": f"A{i}", "gold_titles": [f"T{i}"]}
            for i in range(3)]
    dataset = tmp_path / "questions.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    settings = ServerSettings(ui={"dataset": str(dataset), "dataset_split": "all", "dataset_limit": 2})
    with serve_app(engine, settings, RagService(served_pipelines(engine), "standard_rag")) as running:
        listed = httpx.get(f"{running.url}/v1/rag/examples", params={"source": "dataset"}).json()
        assert listed["sources"] == ["dataset", "demo"] and [q["id"] for q in listed["data"]] == ["dataset:q0",
                                                                                                "dataset:q1"]
        streamed = events(running.url, {"question": "Question 1?", "example": "dataset:q1"})
        assert streamed[-2]["score"]["gold"] == "A1" and streamed[-2]["score"]["gold_titles"] == ["T1"]


def test_without_the_ui_there_is_no_page(serve_app, engine):
    with serve_app(engine, ServerSettings(ui={"enabled": False})) as running:
        assert httpx.get(f"{running.url}/").status_code == 404


def _until(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
