"""Refuse request bodies over `max_body_bytes` with a 413, whether or not they declare a Content-Length."""
from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastapi import HTTPException

from orthrus_rag.serving.errors import APIError


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app, self.limit = app, max_body_bytes
        self.message = (f"the request body is larger than the server's limit of {max_body_bytes} bytes "
                        "(server.max_body_bytes)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = next((value for name, value in scope.get("headers", []) if name == b"content-length"), b"")
        if declared.isdigit() and int(declared) > self.limit:
            error = APIError(413, self.message, code="request_too_large")
            return await error.response()(scope, receive, send)
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise HTTPException(413, self.message)  # FastAPI passes HTTPExceptions through
            return message

        await self.app(scope, counted, send)

