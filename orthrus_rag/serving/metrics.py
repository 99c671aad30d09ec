"""Prometheus metrics, one registry per app: engine gauges and counters read at scrape time, request latency.

Every API route (a path under /v1/) is measured, labelled with its path as the app declares it."""
from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ServerMetrics:
    """The app's registry, and the collector of its engine families (read from `engine.stats()` on every scrape)."""

    def __init__(self, engine):
        self.engine = engine
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.latency = Histogram("orthrus_request_latency_seconds", "Time from request to the last response byte",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.requests = Counter("orthrus_http_requests", "HTTP requests answered", ["endpoint", "status"],
                                registry=self.registry)

    def collect(self) -> Iterator[Metric]:
        stats = self.engine.stats()
        waiting = GaugeMetricFamily("orthrus_waiting_requests", "Requests waiting to be scheduled", labels=["kind"])
        for kind, n in stats.get("waiting", {}).items():
            waiting.add_metric([kind], n)
        tokens = CounterMetricFamily("orthrus_tokens", "Tokens processed by the engine", labels=["kind"])
        for kind, n in stats.get("tokens", {}).items():
            tokens.add_metric([kind], n)
        yield waiting
        yield tokens
        yield GaugeMetricFamily("orthrus_running_requests", "Requests admitted and running", stats.get("running", 0))
        yield GaugeMetricFamily("orthrus_kv_blocks_used", "KV cache blocks in use", stats.get("kv_blocks_used", 0))
        yield GaugeMetricFamily("orthrus_kv_blocks_total", "KV cache blocks in the pool",
                                stats.get("kv_blocks_total", 0))
        yield CounterMetricFamily("orthrus_engine_steps", "Engine steps run", stats.get("steps", 0))


class MetricsMiddleware:
    """Times each API request until its last body byte is sent (so streams count in full)."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_api_request(scope):
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:  # labelled with the route's path as declared (`/v1/items/{id}`), or the request's path when it
            # never reached a route (refused before routing, e.g. a body over the limit)
            endpoint = getattr(scope.get("route"), "path", scope["path"])
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)
            self.metrics.requests.labels(endpoint, str(status)).inc()


def is_api_request(scope: Scope) -> bool:
    """Whether the request is for one of the app's API routes (a path under /v1/, any method)."""
    return scope["path"].startswith("/v1/") and any(
        route.matches(scope)[0] != Match.NONE for route in scope["app"].router.routes)
