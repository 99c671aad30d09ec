"""Ray Serve: two engine replicas behind the same API give the single-process server's answers, abort on
disconnect, and survive losing a replica."""
from __future__ import annotations

import asyncio
import re
import socket
import time

import httpx
import numpy as np
import pytest
from openai import AsyncOpenAI

from orthrus_rag.engine import EngineConfig
from orthrus_rag.serving.ray_serve import ReplicaSpec
from orthrus_rag.serving.settings import ServerSettings
from tests.serving.conftest import rag_plan

pytestmark = pytest.mark.ray
APP = "orthrus-rag-test"
PROMPTS = [f"Item {i}: the river that flows through town number {i} is" for i in range(6)]
CHATS = [[{"role": "user", "content": f"Name a colour for day {i}."}] for i in range(6)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.2)


def both_running(url: str) -> bool:
    """Both replicas report requests running (their counters reach the ingress once a stats period)."""
    running = metric(url, "orthrus_replica_running_requests")
    return len(running) == 2 and all(value > 0 for value in running.values())


def metric(url: str, name: str) -> dict[str, float]:
    """A metric family's samples from /metrics: label text (or '') -> value."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {labels or "": float(value) for labels, value in
            re.findall(rf"^{name}(?:{{(.*)}})? (\S+)$", text, re.MULTILINE)}


@pytest.fixture(scope="module")
def ray_url(ray_cluster, tiny_llama_dir, tiny_encoder_dir, tmp_path_factory):
    from ray import serve

    from orthrus_rag.serving.ray_serve import deploy, undeploy

    engine = EngineConfig(generator=str(tiny_llama_dir), embedder=str(tiny_encoder_dir), dtype="float32",
                          num_threads=1)
    plan = rag_plan(engine, tmp_path_factory.mktemp("ray-index") / "index",
                    {"standard_rag": {"k": 3, "max_tokens": 4, "num_demos": 0}})
    settings = ServerSettings(port=free_port(), replicas=2, num_cpus=0.5, default_max_tokens=16,
                              log_level="warning")
    deploy(ReplicaSpec(plan, "standard_rag"), settings, APP)
    url = f"http://127.0.0.1:{settings.port}"
    wait_until(lambda: metric(url, "orthrus_replicas").get("") == 2, 60, "the replicas did not report")
    yield url
    undeploy(APP)
    serve.shutdown()


def replica_names(app: str) -> list[str]:
    import ray

    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{app}#EngineReplica#")]


async def answers(client: AsyncOpenAI, model: str, embedder: str) -> dict:
    """Completions, chats, streamed chats and embeddings for the same inputs, all sent at once."""
    greedy = dict(temperature=0, max_tokens=12)
    completions = [client.completions.create(model=model, prompt=p, **greedy) for p in PROMPTS]
    chats = [client.chat.completions.create(model=model, messages=m, **greedy) for m in CHATS]
    streams = [_streamed(client, model, m) for m in CHATS]
    embeds = [client.embeddings.create(model=embedder, input=[p, p[::-1]]) for p in PROMPTS]
    done = await asyncio.gather(*completions, *chats, *streams, *embeds)
    n = len(PROMPTS)
    return {"completions": [c.choices[0].text for c in done[:n]],
            "chats": [c.choices[0].message.content for c in done[n:2 * n]],
            "streams": done[2 * n:3 * n],
            "embeddings": [np.array([d.embedding for d in e.data]) for e in done[3 * n:]]}


async def _streamed(client: AsyncOpenAI, model: str, messages: list) -> str:
    stream = await client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=12,
                                                  stream=True)
    return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])


async def test_two_replicas_answer_as_the_single_process_server(ray_url, server):
    model, embedder = server.state.generator_name, server.state.embedder_name
    before = metric(ray_url, "orthrus_replica_engine_steps")
    clients = [AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
               for url in (ray_url, server.url)]
    got, want = [await answers(client, model, embedder) for client in clients]
    assert got["completions"] == want["completions"] and got["chats"] == want["chats"]
    assert got["streams"] == want["chats"]
    for g, w in zip(got["embeddings"], want["embeddings"]):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)
    time.sleep(1.0)  # a stats period: the replicas' counters reach the ingress
    after = metric(ray_url, "orthrus_replica_engine_steps")
    assert len(after) == 2 and all(after[r] > before.get(r, 0) for r in after)  # both replicas did work
    feed = httpx.get(f"{ray_url}/v1/engine/steps", timeout=10).json()["replicas"]
    assert len(feed) == 2 and all(r["steps"] for r in feed)  # each replica's own steps
    models = httpx.get(f"{ray_url}/v1/models", timeout=10).json()
    assert {m["id"] for m in models["data"]} == {model, embedder}


def test_rag_and_errors_go_through_the_replicas(ray_url):
    reply = httpx.post(f"{ray_url}/v1/rag", json={"question": "Which river flows through the capital?"}, timeout=60)
    assert reply.status_code == 200 and len(reply.json()["passages"]) == 3
    unknown = httpx.post(f"{ray_url}/v1/rag", json={"question": "q", "pipeline": "ircot"}, timeout=60)
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "pipeline"
    too_long = httpx.post(f"{ray_url}/v1/completions", json={"prompt": "word " * 600, "max_tokens": 4}, timeout=60)
    assert too_long.status_code == 400 and "context length" in too_long.json()["error"]["message"]  # the engine's error


def test_a_disconnected_client_is_aborted_on_its_replica(ray_url):
    long = {"prompt": "Count:", "max_tokens": 500, "ignore_eos": True, "temperature": 0}
    decoded = lambda: metric(ray_url, "orthrus_tokens_total").get('kind="decode"', 0)  # noqa: E731
    start = decoded()
    for _ in range(3):
        with httpx.stream("POST", f"{ray_url}/v1/completions", json={**long, "stream": True}, timeout=60) as reply:
            next(reply.iter_lines())  # the first chunk, then the client goes away
        with pytest.raises(httpx.ReadTimeout):  # no answer within 0.2 s: the client goes away
            httpx.post(f"{ray_url}/v1/completions", json=long, timeout=0.2)
    wait_until(lambda: metric(ray_url, "orthrus_running_requests").get("") == 0, 20, "requests kept running")
    time.sleep(1.0)
    assert 0 < decoded() - start < 6 * 500 / 2  # each request stopped well before its 500 tokens


async def test_killing_a_replica_gives_503s_then_it_comes_back(ray_url):
    import ray

    body = {"prompt": "Count:", "max_tokens": 200, "ignore_eos": True, "temperature": 0}
    names = replica_names(APP)
    victim = names[0]
    async with httpx.AsyncClient(base_url=ray_url, timeout=120) as client:
        load = [asyncio.ensure_future(client.post("/v1/completions", json=body)) for _ in range(50)]
        # polled in a thread, so the requests on this event loop go on meanwhile
        await asyncio.to_thread(wait_until, lambda: both_running(ray_url), 60, "the load never reached both replicas")
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        replies = await asyncio.gather(*load)
    statuses = [r.status_code for r in replies]
    assert set(statuses) == {200, 503}, statuses  # the survivor's requests finish, the victim's get a 503
    for reply in replies:
        if reply.status_code == 503:
            assert reply.json()["error"]["code"] == "replica_unavailable"
    async with httpx.AsyncClient(base_url=ray_url, timeout=120) as client:  # before the replacement is up
        meanwhile = await asyncio.gather(*(client.post("/v1/completions", json={**body, "max_tokens": 4})
                                           for _ in range(10)))
    assert [r.status_code for r in meanwhile] == [200] * 10  # the router no longer picks the dead replica
    wait_until(lambda: len(replica_names(APP)) == 2 and victim not in replica_names(APP)
               and metric(ray_url, "orthrus_replicas").get("") == 2, 90, "the replica was not replaced")
    (new,) = set(replica_names(APP)) - {victim, *names}
    label = f'replica="{new.rsplit("#", 1)[-1]}"'
    new_steps = lambda: metric(ray_url, "orthrus_replica_engine_steps").get(label)  # noqa: E731
    # Later requests all succeed, and the new replica serves some once the ingress's router has learnt of it from
    # the Serve controller (which can lag the replica's own start by seconds on a loaded machine).
    deadline = time.monotonic() + 90
    async with httpx.AsyncClient(base_url=ray_url, timeout=120) as client:
        while not new_steps():
            assert time.monotonic() < deadline, "the new replica never got a request"
            later = await asyncio.gather(*(client.post("/v1/completions", json={**body, "max_tokens": 4})
                                           for _ in range(10)))
            assert [r.status_code for r in later] == [200] * 10
            await asyncio.sleep(1.0)  # a stats period


def test_the_replicas_counters_come_back_after_the_stats_actor_crashes(ray_url):
    import ray

    from orthrus_rag.serving.ray_serve import NAMESPACE, board_name

    steps = lambda: metric(ray_url, "orthrus_engine_steps_total").get("", 0)  # noqa: E731
    ray.kill(ray.get_actor(board_name(APP), namespace=NAMESPACE), no_restart=False)  # as if it crashed
    before = steps()
    reply = httpx.post(f"{ray_url}/v1/completions", json={"prompt": "Count:", "max_tokens": 4}, timeout=60)
    assert reply.status_code == 200
    wait_until(lambda: steps() > before, 30, "the replicas' counters no longer reach /metrics")

def test_replicas_must_be_positive(monkeypatch, capsys):
    from orthrus_rag.serving.cli import main

    monkeypatch.setattr("sys.argv", ["orthrus-rag-serve", "server.replicas=0", "model.name=/nowhere"])
    with pytest.raises(SystemExit):
        main()
    assert "server.replicas: Input should be greater than or equal to 1" in capsys.readouterr().err
