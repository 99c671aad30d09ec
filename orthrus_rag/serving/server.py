"""Running the app under uvicorn: on SIGINT/SIGTERM new requests get 503 while in-flight ones finish."""
from __future__ import annotations

import contextlib
import socket

import uvicorn
from fastapi import FastAPI

from orthrus_rag.serving.settings import ServerSettings


class DrainingServer(uvicorn.Server):
    """A uvicorn server that marks the app as draining as soon as shutdown begins."""

    def __init__(self, app: FastAPI, config: uvicorn.Config):
        super().__init__(config)
        self.lifecycle = app.state.server.lifecycle

    def handle_exit(self, sig: int, frame) -> None:  # noqa: ANN001 - signal handler signature
        self.lifecycle.start_draining()
        super().handle_exit(sig, frame)  # a first signal drains; a second one forces the exit

    def begin_shutdown(self) -> None:
        self.lifecycle.start_draining()
        self.should_exit = True


def make_server(app: FastAPI, settings: ServerSettings) -> DrainingServer:
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                            timeout_graceful_shutdown=settings.timeout_graceful_shutdown, lifespan="on",
                            proxy_headers=False, server_header=False)
    return DrainingServer(app, config)


def serve(app: FastAPI, settings: ServerSettings, sock: socket.socket | None = None) -> None:
    """Serve until interrupted (blocking); `sock` serves on an already bound socket instead of host:port."""
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it drained on; the exit is clean
        make_server(app, settings).run(sockets=[sock] if sock else None)
