"""Safe by default: the Host allow-list (DNS rebinding), JSON-only bodies, the key checked before the body is read
and on every route but /health, a blank key refused, caps on inputs and messages, a server-wide connection limit."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from urllib.parse import urlparse

import httpx
import pytest
from pydantic import ValidationError

from orthrus_rag.serving import ServerSettings
from orthrus_rag.serving.hosts import allowed, default_hosts, host_name
from tests.serving.conftest import API_KEY, fake_rag

KEY = {"Authorization": f"Bearer {API_KEY}"}


def raw_socket(url: str) -> socket.socket:
    address = urlparse(url)
    return socket.create_connection((address.hostname, address.port), timeout=10)


def error_code(resp: httpx.Response) -> str:
    return resp.json()["error"]["code"]


# --- the Host header ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("header,name", [("localhost:8000", "localhost"), ("[::1]:8000", "::1"), ("::1", "::1"),
                                         ("Example.COM", "example.com"), ("127.0.0.1", "127.0.0.1"), ("", "")])
def test_host_name_drops_the_port_and_case(header, name):
    assert host_name(header) == name


def test_allowed_hosts_match_exactly_or_under_a_wildcard_domain():
    hosts = ["rag.example.com", "*.internal"]
    assert allowed("rag.example.com", hosts) and allowed("a.b.internal", hosts)
    assert not allowed("rag.example.com.evil.net", hosts) and not allowed("evilinternal", hosts)
    assert not allowed("", hosts) and allowed("anything", ["*"])


def test_default_hosts_are_loopback_and_the_bound_address():
    assert default_hosts("127.0.0.1") == ["127.0.0.1", "::1", "localhost"]
    assert {"localhost", "10.1.2.3"} <= set(default_hosts("10.1.2.3"))
    assert socket.gethostname().lower() in default_hosts("0.0.0.0")


def test_a_rebound_host_name_gets_400_on_every_route(server):
    """A page on evil.example whose name now resolves to 127.0.0.1 sends `Host: evil.example`."""
    for path in ("/health", "/v1/models", "/"):
        resp = httpx.get(f"{server.url}{path}", headers={"Host": "evil.example"}, timeout=10)
        assert resp.status_code == 400 and error_code(resp) == "host_not_allowed", resp.text
    resp = httpx.post(f"{server.api}/embeddings", json={"input": "x"}, headers={"Host": "evil.example:8000"},
                      timeout=10)
    assert resp.status_code == 400 and "server.allowed_hosts" in resp.json()["error"]["message"]
    port = urlparse(server.url).port
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        assert httpx.get(f"{server.url}/health", headers={"Host": host}, timeout=10).status_code == 200


def test_allowed_hosts_lists_the_names_a_server_answers_for(serve_app, engine):
    with serve_app(engine, ServerSettings(allowed_hosts=["rag.example.com", "*.internal"])) as running:
        def status(host: str) -> int:
            return httpx.get(f"{running.url}/health", headers={"Host": host}, timeout=10).status_code

        assert (status("rag.example.com"), status("node1.internal:80"), status("localhost"), status("x.com")) == (
            200, 200, 400, 400)
    with serve_app(engine, ServerSettings(allowed_hosts=["*"])) as running:
        assert httpx.get(f"{running.url}/health", headers={"Host": "x.com"}, timeout=10).status_code == 200


def test_an_empty_host_list_is_refused():
    with pytest.raises(ValidationError, match="at least one host"):
        ServerSettings(allowed_hosts=[" "])


# --- bodies are JSON ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("headers", [{"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-"
                                     "urlencoded"}, {"Content-Type": "multipart/form-data; boundary=x"}, {}])
def test_a_body_that_is_not_sent_as_json_gets_415(server, headers):
    """A cross-site form or `text/plain` POST needs no CORS preflight: it must not reach the engine."""
    resp = httpx.post(f"{server.api}/completions", content=b'{"prompt": "hi", "max_tokens": 1}', headers=headers,
                      timeout=10)
    assert resp.status_code == 415 and error_code(resp) == "unsupported_media_type", resp.text


def test_json_with_a_charset_is_json(server):
    resp = httpx.post(f"{server.api}/embeddings", content=b'{"input": "hi"}', timeout=30,
                      headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert resp.status_code == 200, resp.text


# --- the API key ----------------------------------------------------------------------------------------------------

def test_a_keyed_server_guards_every_route_but_health(keyed_server):
    for path in ("/metrics", "/", "/web/app.js", "/openapi.json", "/docs", "/v1/models", "/v1/engine/steps",
                 "/v1/rag/pipelines"):
        resp = httpx.get(f"{keyed_server.url}{path}", timeout=10)
        assert resp.status_code == 401 and error_code(resp) == "invalid_api_key", (path, resp.text)
        assert httpx.get(f"{keyed_server.url}{path}", headers=KEY, timeout=10).status_code != 401, path
    assert httpx.get(f"{keyed_server.url}/health", timeout=10).status_code == 200
    empty = httpx.get(f"{keyed_server.api}/models", headers={"Authorization": "Bearer"}, timeout=10)
    assert empty.status_code == 401


def test_metrics_and_the_page_can_be_made_public(serve_app, engine):
    settings = ServerSettings(api_key=API_KEY, metrics_public=True, ui={"public": True})
    with serve_app(engine, settings, rag=fake_rag) as running:
        for path in ("/metrics", "/", "/web/app.js"):
            assert httpx.get(f"{running.url}{path}", timeout=10).status_code == 200, path
        for path in ("/v1/models", "/v1/rag/examples", "/openapi.json"):
            assert httpx.get(f"{running.url}{path}", timeout=10).status_code == 401, path


@pytest.mark.parametrize("key", ["", "   ", "\t"])
def test_a_blank_api_key_is_refused(monkeypatch, key):
    with pytest.raises(ValidationError, match="would let anyone in"):
        ServerSettings(api_key=key)
    monkeypatch.setenv("ORTHRUS_RAG_API_KEY", key)
    with pytest.raises(ValidationError, match="would let anyone in"):
        ServerSettings.from_config({})


def test_the_server_command_refuses_a_blank_key_with_one_line(tmp_path):
    env = {**os.environ, "ORTHRUS_RAG_API_KEY": " ", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "orthrus_rag.serving.cli", f"hydra.run.dir={tmp_path}"],
                          capture_output=True, text=True, timeout=120, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("orthrus-rag-serve: error: server.api_key: an empty or blank API key"), lines


def test_a_slow_unauthenticated_body_is_answered_401_at_once_and_holds_no_slot(serve_app, engine):
    """Clients with a wrong key that announce a body and never send it: each gets 401 before the body is read, and
    the one slot of the key (max_concurrent_per_key=1) stays free for the real client."""
    settings = ServerSettings(api_key=API_KEY, max_concurrent_per_key=1)
    with serve_app(engine, settings) as running:
        address = urlparse(running.url)
        slow = [raw_socket(running.url) for _ in range(3)]
        start = time.monotonic()
        for sock in slow:
            sock.sendall(f"POST /v1/embeddings HTTP/1.1\r\nHost: {address.netloc}\r\nAuthorization: Bearer wrong\r\n"
                         "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"inp".encode())
        for sock in slow:
            assert sock.recv(4096).startswith(b"HTTP/1.1 401"), "a wrong key was not refused before the body"
        assert time.monotonic() - start < 5
        ok = httpx.post(f"{running.api}/embeddings", json={"input": "x"}, headers=KEY, timeout=30)
        assert ok.status_code == 200, ok.text
        for sock in slow:
            sock.close()


# --- caps -----------------------------------------------------------------------------------------------------------

def test_inputs_per_embeddings_request_and_messages_per_chat_are_capped(serve_app, engine):
    settings = ServerSettings(max_embedding_inputs=3, max_chat_messages=2, default_max_tokens=2)
    with serve_app(engine, settings) as running:
        many = httpx.post(f"{running.api}/embeddings", json={"input": ["a"] * 4}, timeout=30)
        assert many.status_code == 400 and error_code(many) == "too_many_inputs", many.text
        assert "server.max_embedding_inputs" in many.json()["error"]["message"]
        assert httpx.post(f"{running.api}/embeddings", json={"input": ["a"] * 3}, timeout=30).status_code == 200
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"},
                    {"role": "user", "content": "and?"}]
        long = httpx.post(f"{running.api}/chat/completions", json={"messages": messages}, timeout=30)
        assert long.status_code == 400 and error_code(long) == "too_many_messages", long.text
        ok = httpx.post(f"{running.api}/chat/completions", json={"messages": messages[1:]}, timeout=30)
        assert ok.status_code == 200, ok.text


def test_connections_past_the_server_wide_limit_get_503(serve_app, engine):
    with serve_app(engine, ServerSettings(max_connections=2)) as running:
        idle = [raw_socket(running.url) for _ in range(2)]
        time.sleep(0.3)  # the server has accepted both
        resp = httpx.get(f"{running.url}/health", timeout=10)
        assert resp.status_code == 503, resp.text
        for sock in idle:
            sock.close()
        time.sleep(0.3)
        assert httpx.get(f"{running.url}/health", timeout=10).status_code == 200
