"""Server lifecycle: serving under uvicorn (at most `server.max_connections` connections), answering 503 while the
engine cannot serve, then draining: from SIGINT/SIGTERM on, new requests get 503 while in-flight ones finish."""
from __future__ import annotations

import contextlib

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from orthrus_rag.serving.errors import APIError
from orthrus_rag.serving.limits import engine_route
from orthrus_rag.serving.settings import ServerSettings
from orthrus_rag.serving.state import ServerState


class AvailabilityMiddleware:
    """Answers 503 to every new request once the server is shutting down (`ServerState.draining`), and to every new
    engine request (`engine_route`) while the engine cannot serve (dead or stalled: `engine.health()`), so that a
    request never waits in the queue of an engine that will not answer it."""

    def __init__(self, app: ASGIApp, state: ServerState):
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.state.draining:
            error = APIError(503, "the server is shutting down; retry on another instance", "server_error",
                             code="shutting_down")
            return await error.response()(scope, receive, send)
        if scope["type"] == "http" and engine_route(scope["path"]) and (reason := self.state.engine.health()):
            error = APIError(503, f"the engine cannot serve: {reason}", "server_error", code="engine_unavailable")
            return await error.response()(scope, receive, send)
        await self.app(scope, receive, send)


class DrainingServer(uvicorn.Server):
    """A uvicorn server that marks the app as draining as soon as shutdown begins."""

    def __init__(self, app: FastAPI, config: uvicorn.Config):
        super().__init__(config)
        self.state = app.state.server

    def handle_exit(self, sig: int, frame) -> None:  # noqa: ANN001 - signal handler signature
        self.state.draining = True
        super().handle_exit(sig, frame)  # a first signal drains; a second one forces the exit


def make_server(app: FastAPI, settings: ServerSettings) -> DrainingServer:
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                            timeout_graceful_shutdown=settings.timeout_graceful_shutdown, lifespan="on",
                            limit_concurrency=settings.max_connections,
                            proxy_headers=False, server_header=False)
    return DrainingServer(app, config)


def serve(app: FastAPI, settings: ServerSettings) -> None:
    """Serve until interrupted (blocking)."""
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it drained on; the exit is clean
        make_server(app, settings).run()
