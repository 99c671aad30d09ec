"""`/metrics`: engine gauges and counters read at scrape time, request latency histograms per endpoint."""
from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def scrape(server) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_reflect_engine_and_requests(server):
    httpx.post(f"{server.api}/embeddings", json={"input": "count me"}, timeout=30).raise_for_status()
    httpx.post(f"{server.api}/completions", json={"prompt": "hi", "max_tokens": 3}, timeout=30).raise_for_status()
    samples = scrape(server)
    stats = server.engine.stats()
    assert samples[("orthrus_kv_blocks_total", ())] == stats["kv_blocks_total"]
    assert samples[("orthrus_kv_blocks_used", ())] == stats["kv_blocks_used"]
    assert ("orthrus_running_requests", ()) in samples
    assert samples[("orthrus_tokens_total", (("kind", "embed"),))] >= 2
    assert samples[("orthrus_tokens_total", (("kind", "decode"),))] >= 2
    assert ("orthrus_waiting_requests", (("kind", "generate"),)) in samples
    for endpoint in ("/v1/embeddings", "/v1/completions"):
        assert samples[("orthrus_request_latency_seconds_count", (("endpoint", endpoint),))] >= 1
    assert samples[("orthrus_http_requests_total", (("endpoint", "/v1/embeddings"), ("status", "200")))] >= 1


def test_each_app_has_its_own_registry(serve_app, engine, server):
    with serve_app(engine) as other:
        fresh = scrape(other)
    assert ("orthrus_request_latency_seconds_count", (("endpoint", "/v1/embeddings"),)) not in fresh


def test_every_api_route_is_measured_and_nothing_else(engine):
    """Endpoint labels come from the app's own routes: a route added later is measured without listing it."""
    from fastapi.testclient import TestClient

    from orthrus_rag.serving import create_app

    app = create_app(engine, owns_engine=False)
    app.add_api_route("/v1/echo/{word}", lambda word: {"word": word}, methods=["GET"])
    client = TestClient(app, base_url="http://localhost")  # a Host the server answers for
    assert client.get("/v1/echo/hi").json() == {"word": "hi"}
    assert client.get("/v1/models").status_code == 200 and client.get("/health").status_code == 200
    assert client.get("/v1/nowhere").status_code == 404
    text = client.get("/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    counted = {dict(labels)["endpoint"] for (name, labels) in samples if name == "orthrus_http_requests_total"}
    assert counted == {"/v1/echo/{word}", "/v1/models"}
    assert samples[("orthrus_http_requests_total", (("endpoint", "/v1/echo/{word}"), ("status", "200")))] == 1
