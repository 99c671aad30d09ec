"""Disconnects free their KV blocks, a full queue answers 429, shutdown drains in-flight work and refuses new work."""
from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer
from orthrus_rag.serving import ServerSettings

LONG = {"prompt": "Count with me:", "max_tokens": 400, "temperature": 0, "ignore_eos": True}


def wait_for(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_disconnect_mid_stream_aborts_and_frees_blocks(server):
    engine = server.engine
    decoded_before = engine.stats()["tokens"]["decode"]
    with httpx.stream("POST", f"{server.api}/completions", json={**LONG, "stream": True}, timeout=60) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        assert wait_for(lambda: engine.stats()["kv_blocks_used"] > 0, 5)
    # the connection is closed mid-generation: the request must be aborted, not run to its 400 tokens
    assert wait_for(lambda: engine.stats()["kv_blocks_used"] == 0 and engine.stats()["running"] == 0)
    assert engine.stats()["tokens"]["decode"] - decoded_before < 350


def send_and_hang_up_later(url: str, path: str, body: dict) -> socket.socket:
    """A raw HTTP/1.1 request whose connection the caller closes without reading the answer."""
    address = urlparse(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n")
    sock.sendall(head.encode() + payload)
    return sock


def engine_idle(engine) -> bool:
    stats = engine.stats()
    return stats["running"] == 0 and stats["kv_blocks_used"] == 0 and not any(stats["waiting"].values())


@pytest.fixture(scope="module")
def slow_server(serve_app, make_engine):
    """A server whose engine takes 32 tokens a step (long inputs span many steps) and whose RAG generates long."""
    engine = make_engine(max_num_batched_tokens=32)

    async def long_rag(question: str, pipeline: str | None) -> Answer:
        out = await engine.generate(question, SamplingParams(max_tokens=400, ignore_eos=True))
        return Answer(question, out.text)

    try:
        with serve_app(engine, ServerSettings(max_body_bytes=4 << 20), rag=long_rag, owns_engine=True) as running:
            yield running
    finally:
        engine.shutdown()


LONG_CALLS = {
    "completions": ("/v1/completions", LONG, "decode", 400),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Count with me:"}], "max_tokens": 400,
                                      "temperature": 0, "ignore_eos": True}, "decode", 400),
    "rag": ("/v1/rag", {"question": "Count with me:"}, "decode", 400),
    "embeddings": ("/v1/embeddings", {"input": [[7] * 500] * 64, "model": "tiny-llama"}, "embed", 64 * 500),
}


@pytest.mark.parametrize("name", list(LONG_CALLS))
def test_disconnect_before_the_answer_aborts_and_frees_blocks(slow_server, name):
    engine = slow_server.engine
    path, body, kind, total = LONG_CALLS[name]
    if name == "embeddings":
        body = {**body, "model": slow_server.state.generator_name}  # the backbone: long inputs are chunked
    before = engine.stats()["tokens"][kind]
    sock = send_and_hang_up_later(slow_server.url, path, body)
    assert wait_for(lambda: engine.stats()["tokens"][kind] > before, 10), "the request never started"
    sock.close()  # gone before any answer: the request must be aborted, not run to the end
    assert wait_for(lambda: engine_idle(engine)), engine.stats()
    assert engine.stats()["tokens"][kind] - before < total * 0.9, "the request ran on after the disconnect"
    later = httpx.post(f"{slow_server.url}{path}", json={**body, "max_tokens": 2} if kind == "decode" else
                       {**body, "input": "still serving"}, timeout=60)
    assert later.status_code == 200, later.text
    assert engine_idle(engine)
    assert abandoned_requests(slow_server, path) >= 1


def abandoned_requests(server, path: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "orthrus_http_requests_total" and s.labels == {"endpoint": path, "status": "499"})


def test_full_waiting_queue_answers_429(serve_app, make_engine):
    engine = make_engine(max_waiting=1, max_num_seqs=1)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=f"{running.api}", timeout=60) as client:
            body = {**LONG, "max_tokens": 40}
            return await asyncio.gather(*(client.post("/completions", json=body) for _ in range(8)))

    try:
        with serve_app(engine, owns_engine=True) as running:
            statuses = [r.status_code for r in asyncio.run(burst())]
            refused = next(r for r in asyncio.run(burst()) if r.status_code == 429)
            assert refused.json()["error"]["type"] == "rate_limit_error"
            assert refused.json()["error"]["code"] == "queue_full"
    finally:
        engine.shutdown()
    assert set(statuses) <= {200, 429} and 200 in statuses and 429 in statuses


def test_draining_server_answers_503(serve_app, engine):
    with serve_app(engine) as running:
        assert httpx.get(f"{running.url}/health", timeout=10).status_code == 200
        running.state.draining = True
        resp = httpx.post(f"{running.api}/embeddings", json={"input": "late"}, timeout=10)
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "shutting_down"
        assert httpx.get(f"{running.url}/health", timeout=10).status_code == 503


def test_shutdown_finishes_in_flight_stream_then_stops_engine(serve_app, make_engine):
    engine = make_engine()
    chunks: list[str] = []
    started = threading.Event()

    def read_stream(url: str) -> None:
        with httpx.stream("POST", url, json={**LONG, "max_tokens": 120, "stream": True}, timeout=60) as resp:
            for line in resp.iter_lines():
                if line:
                    chunks.append(line)
                    started.set()

    try:
        with serve_app(engine, ServerSettings(), owns_engine=True) as running:
            reader = threading.Thread(target=read_stream, args=(f"{running.api}/completions",))
            reader.start()
            assert started.wait(20)
            # as on SIGTERM: leaving the block waits for the server (and its lifespan) to end
            running.server.handle_exit(signal.SIGTERM, None)
        reader.join(30)
        assert chunks[-1] == "data: [DONE]"
        assert '"finish_reason":"length"' in next(c for c in reversed(chunks) if "finish_reason" in c
                                                  and '"finish_reason":null' not in c)
        assert not engine._thread.is_alive()  # the app's lifespan shut its engine down after the drain
    finally:
        engine.shutdown()


def test_first_signal_drains_without_forcing_exit(engine):
    from orthrus_rag.serving import create_app
    from orthrus_rag.serving.lifecycle import make_server

    app = create_app(engine, owns_engine=False)
    server = make_server(app, ServerSettings())
    server.handle_exit(signal.SIGINT, None)
    assert app.state.server.draining and server.should_exit and not server.force_exit


def test_a_dead_engine_answers_503_engine_unavailable(serve_app, make_engine):
    """The engine thread dies mid-request: the request in flight and every later one get 503 engine_unavailable
    within a second, and /health says so."""
    engine = make_engine()

    def fail_all(err):
        raise AssertionError("block 3 freed twice")

    try:
        with serve_app(engine, owns_engine=True) as running:
            assert httpx.get(f"{running.url}/health", timeout=10).status_code == 200
            real_step = engine.engine.step
            engine._fail_all = fail_all
            engine.engine.step = lambda early=None: 1 / 0 if engine.engine.requests else real_step(early)
            start = time.monotonic()
            resp = httpx.post(f"{running.api}/completions", json={**LONG, "max_tokens": 40}, timeout=10)
            later = httpx.post(f"{running.api}/completions", json={**LONG, "max_tokens": 4}, timeout=10)
            assert time.monotonic() - start < 1
            for r in (resp, later):
                assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable", r.text
            health = httpx.get(f"{running.url}/health", timeout=10)
            assert health.status_code == 503 and "freed twice" in health.json()["error"]["message"]
    finally:
        engine.shutdown(timeout_s=5)


def test_a_request_past_its_deadline_is_stopped_and_answered_504(serve_app, make_engine):
    from orthrus_rag.serving.settings import ServerSettings

    engine = make_engine()
    try:
        with serve_app(engine, ServerSettings(request_timeout_s=30), owns_engine=True) as running:
            start = time.monotonic()
            resp = httpx.post(f"{running.api}/completions", json={**LONG, "max_tokens": 400, "timeout": 0.3},
                              timeout=30)
            assert resp.status_code == 504 and resp.json()["error"]["code"] == "request_timeout", resp.text
            assert time.monotonic() - start < 5
            assert wait_for(lambda: engine_idle(engine), 10)  # the engine request was aborted, its blocks freed
            ok = httpx.post(f"{running.api}/completions", json={**LONG, "max_tokens": 2, "timeout": 30}, timeout=30)
            assert ok.status_code == 200
            bad = httpx.post(f"{running.api}/completions", json={**LONG, "timeout": -1}, timeout=30)
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "timeout"
    finally:
        engine.shutdown(timeout_s=10)


def test_requests_beyond_the_per_key_limit_get_429(serve_app, make_engine):
    from orthrus_rag.serving.settings import ServerSettings

    engine = make_engine()

    async def burst(key: str) -> list[int]:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=running.api, timeout=60, headers=headers) as client:
            replies = await asyncio.gather(*(client.post("/completions", json={**LONG, "max_tokens": 30})
                                             for _ in range(6)))
        return [r.status_code for r in replies]

    try:
        settings = ServerSettings(api_key="k1", max_concurrent_per_key=2)
        with serve_app(engine, settings, owns_engine=True) as running:
            statuses = asyncio.run(burst("k1"))
            assert sorted(statuses) == [200, 200, 429, 429, 429, 429], statuses
            assert asyncio.run(burst("wrong")).count(401) == 6  # a wrong key is refused, not counted
            assert asyncio.run(burst("k1")).count(200) == 2  # the slots were given back
    finally:
        engine.shutdown(timeout_s=10)


def test_a_stalled_engine_answers_503_at_once_instead_of_queueing(serve_app, make_engine):
    """A step that never returns: /health and every new engine request answer 503 engine_unavailable at once (no
    request waits in the queue of an engine that will not answer it); listings still answer."""
    engine = make_engine(stall_timeout_s=0.5)
    release = threading.Event()
    try:
        with serve_app(engine, ServerSettings(request_timeout_s=None), owns_engine=True) as running:
            real_step = engine.engine.step
            engine.engine.step = lambda early=None: release.wait() and real_step(early)
            with httpx.Client(base_url=running.url, timeout=30) as client:
                stuck = threading.Thread(target=client.post, args=("/v1/completions",),
                                         kwargs={"json": {**LONG, "max_tokens": 4}}, daemon=True)
                stuck.start()
                assert wait_for(lambda: client.get("/health").status_code == 503, 10)
                start = time.monotonic()
                for path, body in (("/v1/completions", {**LONG, "max_tokens": 4}), ("/v1/embeddings", {"input": "x"}),
                                   ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
                    resp = client.post(path, json=body)
                    assert resp.status_code == 503 and resp.json()["error"]["code"] == "engine_unavailable", resp.text
                    assert "no engine step finished" in resp.json()["error"]["message"]
                assert time.monotonic() - start < 2
                assert client.get("/v1/models").status_code == 200
                release.set()  # the step returns: the engine serves again
                assert wait_for(lambda: client.get("/health").status_code == 200, 10)
                assert client.post("/v1/embeddings", json={"input": "x"}).status_code == 200
    finally:
        release.set()
        engine.shutdown(timeout_s=10)


def test_a_stream_its_client_never_reads_is_stopped_and_its_connection_closed(serve_app, make_engine):
    """A client that sends a streaming request and then reads nothing: once the kernel's and the server's buffers
    are full, the stream is stopped in the engine after server.stream_write_timeout_s and its connection closed."""
    engine = make_engine(max_model_len=4096)  # 4,000 tokens of stream (~800 KB): far more than any buffer holds
    settings = ServerSettings(stream_write_timeout_s=1.0, request_timeout_s=None)
    try:
        with serve_app(engine, settings, owns_engine=True, send_buffer=4096) as running:
            address = urlparse(running.url)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # a client that reads nothing fills it soon
            sock.connect((address.hostname, address.port))
            payload = json.dumps({**LONG, "max_tokens": 4000, "stream": True}).encode()
            sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json"
                         f"\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
            before = engine.stats()["tokens"]["decode"]
            assert wait_for(lambda: engine.stats()["tokens"]["decode"] > before, 10), "the stream never started"
            assert wait_for(lambda: engine_idle(engine), 60), engine.stats()
            generated = engine.stats()["tokens"]["decode"] - before
            sock.settimeout(10)
            received = b""
            while chunk := sock.recv(65536):  # what the buffers held, then the end: the server closed it
                received += chunk
            assert b"[DONE]" not in received and generated < 3000, (generated, len(received))
            ok = httpx.post(f"{running.api}/completions", json={**LONG, "max_tokens": 2}, timeout=30)
            assert ok.status_code == 200
    finally:
        engine.shutdown(timeout_s=10)
