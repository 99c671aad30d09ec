"""Bounded requests on the API routes (`/v1/...` but the read-only listings in UNBOUNDED): a deadline per request,
which a route shortens to the request's own `timeout` with `shorten_deadline` (504 past it), and at most
`server.max_concurrent_per_key` requests in flight per API key (429 beyond); docs/serving.md#bounded-requests.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass, field

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orthrus_rag.serving.errors import APIError

SCOPE_KEY = "orthrus_deadline"
UNBOUNDED = ("/v1/engine/steps", "/v1/rag/pipelines", "/v1/rag/examples", "/v1/models")


@dataclass
class Deadline:
    """When the request must be done (event-loop time; None: never), and a signal when a route shortens it. A route
    whose started response ends itself at `at` (a stream that sends an error event) sets `grace_s`: how long past
    `at` it may take to do so before it is cut off."""

    start: float
    at: float | None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    grace_s: float = 0.0

    def remaining(self) -> float | None:
        return None if self.at is None else self.at - asyncio.get_running_loop().time()


def shorten_deadline(request: Request, timeout_s: float | None) -> None:
    """A route's request asked for `timeout_s` seconds at most (None: the server's deadline stands)."""
    deadline: Deadline | None = request.scope.get(SCOPE_KEY)
    if timeout_s is None or deadline is None:
        return
    at = asyncio.get_running_loop().time() + timeout_s
    if deadline.at is None or at < deadline.at:
        deadline.at = at
        deadline.changed.set()


def engine_route(path: str) -> bool:
    """Whether a path is an API route that asks the engine for work (every `/v1/` route but the listings)."""
    return path.startswith("/v1/") and path not in UNBOUNDED


class LimitsMiddleware:
    def __init__(self, app: ASGIApp, timeout_s: float | None, max_per_key: int | None, api_key: str | None):
        self.app, self.timeout_s, self.max_per_key, self.api_key = app, timeout_s, max_per_key, api_key
        self.in_flight: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not engine_route(scope["path"]):
            return await self.app(scope, receive, send)
        # requests count by the server's API key (auth.py let only its holders in), or by the client's address when
        # the server has no key (a token sent to a keyless server counts for nothing)
        key = "key" if self.api_key is not None else f"addr:{(scope.get('client') or ('?', 0))[0]}"
        if self.max_per_key is not None and self.in_flight[key] >= self.max_per_key:
            error = APIError(429, f"too many requests in flight for this key (server.max_concurrent_per_key="
                                  f"{self.max_per_key}); wait for one to finish", "rate_limit_error",
                             code="concurrency_limit")
            return await error.response()(scope, receive, send)
        self.in_flight[key] += 1
        try:
            await self._bounded(scope, receive, send)
        finally:
            self.in_flight[key] -= 1
            if not self.in_flight[key]:
                del self.in_flight[key]

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        now = asyncio.get_running_loop().time()
        deadline = scope[SCOPE_KEY] = Deadline(now, None if self.timeout_s is None else now + self.timeout_s)
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        route = asyncio.ensure_future(self.app(scope, receive, tracked))
        try:
            while not route.done():
                deadline.changed.clear()
                remaining = deadline.remaining()
                if remaining is not None and started:
                    remaining += deadline.grace_s
                if remaining is not None and remaining <= 0:
                    break
                waiter = asyncio.ensure_future(deadline.changed.wait())
                await asyncio.wait({route, waiter}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
        except BaseException:
            route.cancel()
            raise
        if route.done():
            return route.result()
        route.cancel()  # past the deadline: cancelling the route aborts its engine request
        with contextlib.suppress(BaseException):
            await route
        if not started:
            error = APIError(504, f"the request ran past its deadline ({deadline.at - deadline.start:.3g} s: "
                                  "server.request_timeout_s or the request's timeout) and was stopped; retry with a "
                                  "smaller max_tokens or a longer timeout", "timeout_error", code="request_timeout")
            await error.response()(scope, receive, send)
