"""RemoteEngine against a stub OpenAI-compatible server: what it sends, what it makes of each answer, its retries
and its errors."""
from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from orthrus_rag.engine import PoolingParams, SamplingParams
from orthrus_rag.engine.observe import observing
from orthrus_rag.rag.remote import Endpoint, EndpointSettings, RemoteEngine, RemoteError, completion_body

MODEL = "stub-model"


class Stub(ThreadingHTTPServer):
    """Answers /v1/models, streams /v1/completions, embeds with /v1/embeddings; `script` holds what the next POSTs
    answer instead (a status code, "slow", or "error_event"), `bodies` what each POST sent."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.script: list = []
        self.bodies: list[dict] = []
        self.headers_seen: list[dict] = []

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.send_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self.server.headers_seen.append(dict(self.headers))
        action = self.server.script.pop(0) if self.server.script else None
        if action == "slow":
            time.sleep(1.0)
        elif isinstance(action, int):
            return self.send_json(action, {"error": {"message": f"scripted {action}", "type": "x"}})
        if self.path.endswith("/embeddings"):
            return self.send_json(200, {"data": [{"index": 0, "embedding": [3.0, 4.0]}],
                                        "usage": {"prompt_tokens": 5, "total_tokens": 5}})
        self.stream_completion(action == "error_event")

    def stream_completion(self, fail_midway: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        events = [{"choices": [{"index": 0, "text": "Hello", "finish_reason": None}]},
                  {"error": {"message": "engine died"}} if fail_midway else
                  {"choices": [{"index": 0, "text": " world", "finish_reason": "stop"}]},
                  {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}}]
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def stub():
    server = Stub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def engine_on(url: str, **settings) -> RemoteEngine:
    endpoint = Endpoint(EndpointSettings(url, **settings), MODEL)
    return RemoteEngine(tokenizer=None, generator=endpoint, embedder=endpoint)


async def test_generate_streams_text_usage_and_deltas_to_an_observer(stub):
    engine, seen = engine_on(stub.api), []
    with observing(seen.append):
        out = await engine.generate("Say hi", SamplingParams(max_tokens=5, stop=["\n"], seed=3))
    assert (out.text, out.finish_reason, out.usage.prompt_tokens, out.usage.completion_tokens) == \
        ("Hello world", "stop", 7, 2)
    assert [s.delta_text for s in seen[:-1]] == ["Hello", " world"] and seen[-1].result is out
    assert out.timings.arrival <= out.timings.first_token <= out.timings.finished
    sent = stub.bodies[0]
    assert sent == {"model": MODEL, "prompt": "Say hi", "max_tokens": 5, "temperature": 0.0, "top_p": 1.0,
                    "stream": True, "stream_options": {"include_usage": True}, "stop": ["\n"], "seed": 3}
    assert engine.stats()["remote"]["generator"] | {"url": None} == \
        {"url": None, "model": MODEL, "requests": 1, "retries": 0, "prompt_tokens": 7, "completion_tokens": 2}


def test_completion_body_sends_extensions_only_when_set():
    params = SamplingParams(top_k=4, stop_token_ids=[2], ignore_eos=True)
    body = completion_body("m", [1, 2, 3], params)
    assert (body["prompt"], body["top_k"], body["stop_token_ids"], body["ignore_eos"]) == ([1, 2, 3], 4, [2], True)
    assert not {"top_k", "stop_token_ids", "ignore_eos", "seed", "stop"} & completion_body("m", "x", SamplingParams()).keys()


async def test_embed_normalises_and_sends_the_cut(stub):
    out = await engine_on(stub.api).embed("a query", PoolingParams(truncate=8))
    np.testing.assert_allclose(out.embedding, [0.6, 0.8], rtol=1e-6)
    assert out.num_tokens == 5 and stub.bodies[0]["truncate_prompt_tokens"] == 8
    raw = await engine_on(stub.api).embed("a query", PoolingParams(normalize=False))
    np.testing.assert_array_equal(raw.embedding, [3.0, 4.0])


async def test_busy_answers_are_retried_then_succeed(stub):
    stub.script = [503, 429]
    engine = engine_on(stub.api, retries=2)
    assert (await engine.generate("x")).text == "Hello world"
    assert engine.stats()["remote"]["generator"]["retries"] == 2 and len(stub.bodies) == 3


async def test_errors_name_the_server_and_its_message(stub):
    stub.script = [400]
    with pytest.raises(RemoteError, match=r"/v1/completions answered 400: scripted 400"):
        await engine_on(stub.api).generate("x")
    assert len(stub.bodies) == 1  # a client error is not retried
    stub.script = [503, 503]
    with pytest.raises(RemoteError, match="answered 503"):
        await engine_on(stub.api, retries=1).embed("x")
    stub.script = ["error_event"]
    with pytest.raises(RemoteError, match="failed while streaming: engine died"):
        await engine_on(stub.api).generate("x")


async def test_a_slow_server_times_out_after_its_retries(stub):
    stub.script = ["slow", "slow"]
    with pytest.raises(RemoteError, match="ReadTimeout.*after 2 tries"):
        await engine_on(stub.api, timeout_s=0.2, retries=1).embed("x")


async def test_an_unreachable_server_is_one_clear_error():
    with socket_closed() as url:
        with pytest.raises(RemoteError, match="ConnectError"):
            await engine_on(url, retries=0).generate("x")
        with pytest.raises(RemoteError, match="cannot be reached.*start the server"):
            Endpoint(EndpointSettings(url), MODEL).check()


def test_check_names_the_models_a_server_serves(stub):
    Endpoint(EndpointSettings(stub.api), MODEL).check()
    with pytest.raises(RemoteError, match=r"serves \['stub-model'\], not 'other'.*--served-model-name other"):
        Endpoint(EndpointSettings(stub.api), "other").check()


async def test_the_api_key_comes_from_the_named_variable(stub, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "s3cret")
    await engine_on(stub.api, api_key_env="STUB_KEY").embed("x")
    await engine_on(stub.api, api_key_env="UNSET_KEY_FOR_TEST").embed("x")
    assert stub.headers_seen[0].get("Authorization") == "Bearer s3cret"
    assert "Authorization" not in stub.headers_seen[1]


@pytest.mark.parametrize("settings, message", [({"endpoint": "localhost:8000"}, "http:// or https://"),
                                               ({"timeout_s": 0}, "timeout_s"), ({"retries": -1}, "retries")])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        EndpointSettings(**settings)


def test_a_missing_part_needs_a_local_engine(stub):
    with pytest.raises(ValueError, match="needs a local engine"):
        RemoteEngine(None, generator=Endpoint(EndpointSettings(stub.api), MODEL))


@contextlib.contextmanager
def socket_closed():
    """The URL of a loopback port nothing listens on."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1"
