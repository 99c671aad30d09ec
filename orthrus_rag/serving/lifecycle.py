"""Server lifecycle: serving, then draining (new requests get 503 while in-flight ones finish)."""
from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from orthrus_rag.serving.errors import APIError
from orthrus_rag.serving.state import ServerState


class DrainingMiddleware:
    """Answers 503 to every new request once the server is shutting down (`ServerState.draining`)."""

    def __init__(self, app: ASGIApp, state: ServerState):
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.state.draining:
            error = APIError(503, "the server is shutting down; retry on another instance", "server_error",
                             code="shutting_down")
            return await error.response()(scope, receive, send)
        await self.app(scope, receive, send)
