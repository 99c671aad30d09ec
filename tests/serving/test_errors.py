"""Client mistakes get a 4xx with an OpenAI error body; an unexpected failure fails only its own request."""
from __future__ import annotations

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
