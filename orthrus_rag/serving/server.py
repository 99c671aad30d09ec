"""Running the app under uvicorn: on SIGINT/SIGTERM new requests get 503 while in-flight ones finish."""
from __future__ import annotations

import contextlib

import uvicorn
from fastapi import FastAPI

from orthrus_rag.serving.settings import ServerSettings


class DrainingServer(uvicorn.Server):
    """A uvicorn server that marks the app as draining as soon as shutdown begins."""

    def __init__(self, app: FastAPI, config: uvicorn.Config):
        super().__init__(config)
        self.state = app.state.server

    def handle_exit(self, sig: int, frame) -> None:  # noqa: ANN001 - signal handler signature
        self.state.draining = True
        super().handle_exit(sig, frame)  # a first signal drains; a second one forces the exit

    def begin_shutdown(self) -> None:
        self.state.draining = True
        self.should_exit = True


def make_server(app: FastAPI, settings: ServerSettings) -> DrainingServer:
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                            timeout_graceful_shutdown=settings.timeout_graceful_shutdown, lifespan="on",
                            proxy_headers=False, server_header=False)
    return DrainingServer(app, config)


def serve(app: FastAPI, settings: ServerSettings) -> None:
    """Serve until interrupted (blocking)."""
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it drained on; the exit is clean
        make_server(app, settings).run()
