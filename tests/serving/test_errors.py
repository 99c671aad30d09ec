"""Client mistakes get a 4xx with an OpenAI error body; an unexpected failure fails only its own request."""
from __future__ import annotations

import json

import httpx
import pytest


def post(server, path: str, body=None, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60, **kwargs)


def assert_error(resp: httpx.Response, status: int, param: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param, error
    return error


@pytest.mark.parametrize("path,body,param", [
    ("/v1/embeddings", {"input": ""}, "input"),
    ("/v1/embeddings", {"input": []}, "input"),
    ("/v1/embeddings", {"input": 3.5}, "input"),
    ("/v1/embeddings", {"input": ["ok", 1]}, "input"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}, "encoding_format"),
    ("/v1/embeddings", {"input": "x", "model": "no-such-model"}, "model"),
    ("/v1/embeddings", {"input": "x", "dimensions": 7}, "dimensions"),
    ("/v1/completions", {"prompt": ""}, "input"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": -1}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "many"}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "temperature": -1}, "temperature"),
    ("/v1/completions", {"prompt": "hi", "top_p": 0}, "top_p"),
    ("/v1/completions", {"prompt": "hi", "n": 2}, "n"),
    ("/v1/completions", {"prompt": ["a", "b"]}, "prompt"),
    ("/v1/completions", {"prompt": "hi", "model": "gpt-4"}, "model"),
    ("/v1/completions", {"prompt": [5] * 600}, "input"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 10_000}, "input"),
    ("/v1/completions", {"prompt": "hi", "stream": True, "temperature": -1}, "temperature"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, None),
    ("/v1/chat/completions", {"messages": "hello"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 3000}], "stream": True}, "input"),
    ("/v1/rag", {"question": 12}, "question"),
    ("/v1/rag", {"question": "  "}, "question"),
    ("/v1/rag", {"question": "q", "pipeline": "nope"}, "pipeline"),
])
def test_bad_input_is_400(server, path, body, param):
    assert_error(post(server, path, body), 400, param)


def test_missing_field_malformed_json_and_unknown_route(server):
    assert_error(post(server, "/v1/embeddings", {}), 400, "input")
    resp = httpx.post(f"{server.url}/v1/completions", content=b"{not json", timeout=10,
                      headers={"content-type": "application/json"})
    assert_error(resp, 400)
    assert_error(httpx.get(f"{server.url}/v1/nothing-here", timeout=10), 404)


def test_body_over_limit_is_413_with_and_without_length(server):
    big = {"input": "word " * 20_000}  # about 100 KB, the test server allows 64 KiB
    assert_error(post(server, "/v1/embeddings", big), 413)

    def chunks():
        yield b'{"input": "'
        for _ in range(100):
            yield b"w" * 1000
        yield b'"}'

    resp = httpx.post(f"{server.url}/v1/embeddings", content=chunks(), timeout=10,
                      headers={"content-type": "application/json"})
    assert_error(resp, 413)


def test_unexpected_failure_is_500_and_server_keeps_serving(server):
    error = assert_error(post(server, "/v1/rag", {"question": "crash"}), 500)
    assert error["type"] == "server_error"
    ok = post(server, "/v1/rag", {"question": "still there?", "pipeline": "ircot"})
    assert ok.status_code == 200
    assert ok.json()["answer"] == "ircot:still there?" and ok.json()["passages"][0]["id"] == "p1"


def test_rag_without_pipeline_is_501(serve_app, engine):
    with serve_app(engine) as running:
        assert_error(post(running, "/v1/rag", {"question": "q"}), 501)


def test_api_key_required_when_configured(keyed_server):
    body = {"input": "hello"}
    assert_error(post(keyed_server, "/v1/embeddings", body), 401)
    assert_error(post(keyed_server, "/v1/embeddings", body, headers={"Authorization": "Bearer wrong"}), 401)
    good = post(keyed_server, "/v1/embeddings", body, headers={"Authorization": "Bearer test-key"})
    assert good.status_code == 200
    assert httpx.get(f"{keyed_server.url}/v1/models", timeout=10).status_code == 401
    assert httpx.get(f"{keyed_server.url}/health", timeout=10).status_code == 200


def test_api_key_from_environment(monkeypatch):
    from orthrus_rag.serving import ServerSettings

    monkeypatch.setenv("ORTHRUS_RAG_API_KEY", "from-env")
    assert ServerSettings.from_config({}).api_key == "from-env"
    assert ServerSettings.from_config({"api_key": "explicit"}).api_key == "explicit"
    assert ServerSettings().host == "127.0.0.1"


ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/rag")
CHAT = [{"role": "user", "content": "hi"}]


def post_raw(server, path: str, content: bytes) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", content=content, timeout=60,
                      headers={"content-type": "application/json"})


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("content", [b"[]", b'"text"', b"1", b"null", b"true", b"", b"{\"a\": {\"b\": [null, {}]}}",
                                     b"\xff\xfe{}", b'{"prompt": "\xc3\x28", "input": "\xed\xa0\x80"}',
                                     b"[" * 20_000 + b"]" * 20_000, b'{"x": 1e999999}'],
                         ids=["list", "string", "number", "null", "bool", "empty", "nested", "bad-utf8-bom",
                              "invalid-utf8", "deep-nesting", "huge-float"])
def test_malformed_bodies_are_400(server, path, content):
    assert_error(post_raw(server, path, content), 400)


@pytest.mark.parametrize("path,field,body", [
    ("/v1/completions", "prompt", {"prompt": "PLACE"}),
    ("/v1/completions", "stop", {"prompt": "hi", "stop": "PLACE"}),
    ("/v1/chat/completions", "messages", {"messages": [{"role": "user", "content": "PLACE"}]}),
    ("/v1/embeddings", "input", {"input": ["ok", "PLACE"]}),
    ("/v1/rag", "question", {"question": "PLACE"}),
    ("/v1/completions", "model", {"prompt": "hi", "model": "PLACE"}),
])
def test_lone_surrogate_is_400(server, path, field, body):
    """JSON may spell a lone UTF-16 surrogate, which no tokenizer can encode: a 400, not a 500."""
    raw = json.dumps(body).replace("PLACE", "abc\\ud800def").encode()
    error = assert_error(post_raw(server, path, raw), 400, field)
    assert "surrogate" in error["message"] or "unicode" in error["message"]


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "hi", "seed": 2**64}, "seed"),
    ("/v1/completions", {"prompt": "hi", "seed": -1}, "seed"),
    ("/v1/completions", {"prompt": "hi", "top_p": 1.5}, "top_p"),
    ("/v1/completions", {"prompt": "hi", "top_k": -1}, "top_k"),
    ("/v1/completions", {"prompt": "hi", "n": 10**20}, "n"),
    ("/v1/completions", {"prompt": "hi", "n": 0}, "n"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 10**30}, "input"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "5"}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 5.0}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "temperature": "0"}, "temperature"),
    ("/v1/completions", {"prompt": "hi", "stream": None}, "stream"),
    ("/v1/completions", {"prompt": "hi", "stream": "yes"}, "stream"),
    ("/v1/completions", {"prompt": "hi", "stop": [""]}, "stop"),
    ("/v1/completions", {"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ("/v1/completions", {"prompt": "hi", "stop": [f"~{i}" for i in range(5000)]}, "stop"),
    ("/v1/completions", {"prompt": "hi", "stop": ["ok", "x" * 257]}, "stop"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stop": "x" * 257}, "stop"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 5}, "logprobs"),
    ("/v1/completions", {"prompt": "hi", "echo": True}, "echo"),
    ("/v1/completions", {"prompt": "hi", "best_of": 3}, "best_of"),
    ("/v1/completions", {"prompt": "hi", "suffix": "x"}, "suffix"),
    ("/v1/completions", {"prompt": "hi", "stream_options": {"include_usage": "yes"}}, "stream_options"),
    ("/v1/completions", {"prompt": None}, "prompt"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {"prompt": [[]]}, "prompt"),
    ("/v1/completions", {"prompt": [-1]}, "prompt"),
    ("/v1/completions", {"prompt": [True]}, "prompt"),
    ("/v1/completions", {"prompt": [10**9]}, "input"),
    ("/v1/completions", {"prompt": [2**70]}, "input"),
    ("/v1/completions", {"prompt": {"a": [1, {"b": None}]}}, "prompt"),
    ("/v1/completions", {"prompt": "   "}, "input"),
    ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": 0}, "max_completion_tokens"),
    ("/v1/chat/completions", {"messages": CHAT, "temperature": -1e-300}, "temperature"),
    ("/v1/chat/completions", {"messages": [None]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True}, "logprobs"),
    ("/v1/embeddings", {"input": None}, "input"),
    ("/v1/embeddings", {"input": [[]]}, "input"),
    ("/v1/embeddings", {"input": [[-5]]}, "input"),
    ("/v1/embeddings", {"input": [10**9]}, "input"),
    ("/v1/embeddings", {"input": ["a"] * 2049}, "input"),
    ("/v1/embeddings", {"input": "x", "dimensions": 0}, "dimensions"),
    ("/v1/embeddings", {"input": "x", "dimensions": 10**30}, "dimensions"),
    ("/v1/rag", {"question": None}, "question"),
    ("/v1/rag", {"question": "q", "pipeline": 5}, "pipeline"),
])
def test_out_of_range_and_wrong_types_are_400(server, path, body, param):
    assert_error(post(server, path, body), 400, param)
    assert post(server, "/v1/completions", {"prompt": "still serving", "max_tokens": 2}).status_code == 200


@pytest.fixture(scope="module")
def own_server(serve_app, make_engine):
    """A server with an engine of its own, for requests that have stopped an engine loop in the past."""
    engine = make_engine()
    try:
        with serve_app(engine, owns_engine=True) as running:
            yield running
    finally:
        engine.shutdown()


@pytest.mark.parametrize("extra", [{"seed": 2**64 - 1}, {"seed": 0}, {"top_k": 2**70}, {"temperature": 1e308},
                                   {"stop": ["a", "b", "c", "x" * 256]}, {"logprobs": 0}, {"max_tokens": None},
                                   {"echo": False, "best_of": 1, "suffix": "", "n": 1}, {"top_p": 5e-324},
                                   {"top_p": 1e-300, "temperature": 1e-300}])
def test_extreme_values_inside_the_schema_are_answered(own_server, extra):
    resp = post(own_server, "/v1/completions", {"prompt": "hi", "max_tokens": 3, **extra})
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["finish_reason"] in ("length", "stop")


def test_without_max_tokens_the_default_is_cut_to_the_room_the_prompt_leaves(server):
    """The server's default_max_tokens is 16 and the context 512 tokens: a prompt of 500 leaves room for 12."""
    def completion_tokens(body: dict) -> int:
        resp = post(server, "/v1/completions", {**body, "ignore_eos": True})
        assert resp.status_code == 200, resp.text
        return resp.json()["usage"]["completion_tokens"]

    assert completion_tokens({"prompt": [100] * 100}) == 16
    assert completion_tokens({"prompt": [100] * 500}) == 12
    assert completion_tokens({"prompt": [100] * 500, "max_tokens": 3}) == 3
    chat = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi " * 472}],
                                                 "ignore_eos": True}).json()["usage"]
    assert chat["prompt_tokens"] > 512 - 16 and chat["total_tokens"] == 512, chat
    full = assert_error(post(server, "/v1/completions", {"prompt": [100] * 512}), 400, "input")
    assert "max_tokens" not in full["message"] and "512" in full["message"]
    asked = assert_error(post(server, "/v1/completions", {"prompt": [100] * 500, "max_tokens": 13}), 400, "input")
    assert "max_tokens (13)" in asked["message"]


def test_seed_past_64_bits_is_400_and_the_engine_keeps_serving(server):
    body = {"messages": CHAT, "max_tokens": 3, "seed": 18446744073709551616}
    assert_error(post(server, "/v1/chat/completions", body), 400, "seed")
    assert post(server, "/v1/chat/completions", {**body, "seed": 7}).status_code == 200


def test_vanishing_temperature_is_greedy_and_the_engine_keeps_serving(own_server):
    """A temperature so small that logits / temperature overflow samples like temperature 0."""
    greedy = post(own_server, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, "temperature": 0})
    assert greedy.status_code == 200, greedy.text
    for temperature in (1e-50, 5e-324, 1e-8):
        tiny = post(own_server, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 6,
                                                          "temperature": temperature, "seed": 3})
        assert tiny.status_code == 200, tiny.text
        assert tiny.json()["choices"][0]["message"] == greedy.json()["choices"][0]["message"]
    assert post(own_server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).status_code == 200


def test_error_bodies_are_json_objects_with_the_openai_shape(server):
    resp = post(server, "/v1/completions", {"prompt": "hi", "n": 2})
    assert resp.headers["content-type"].startswith("application/json")
    assert_error(resp, 400, "n")


def test_messages_the_chat_template_refuses_are_400(server, monkeypatch):
    template = ("{% for m in messages %}{% if loop.index0 % 2 == 0 and m.role != 'user' %}"
                "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}"
                "{{ m.content }}{% endfor %}")
    monkeypatch.setattr(server.engine.tokenizer, "chat_template", template)
    error = assert_error(post(server, "/v1/chat/completions", {"messages": [{"role": "assistant", "content": "x"}]}),
                         400, "messages")
    assert "alternate" in error["message"]
    assert post(server, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 2}).status_code == 200
