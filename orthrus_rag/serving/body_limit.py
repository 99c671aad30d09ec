"""Request bodies: a request that sends one (POST, PUT, PATCH) must send JSON (`Content-Type: application/json`,
else 415: a cross-site form or `text/plain` POST needs no CORS preflight, a JSON one does), of at most
`max_body_bytes` (413 beyond, whether or not it declares a Content-Length)."""
from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastapi import HTTPException

from orthrus_rag.serving.errors import APIError

BODY_METHODS = ("POST", "PUT", "PATCH")


def is_json(content_type: str) -> bool:
    """Whether a Content-Type is application/json (any parameters, such as a charset, after it)."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app, self.limit = app, max_body_bytes
        self.message = (f"the request body is larger than the server's limit of {max_body_bytes} bytes "
                        "(server.max_body_bytes)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        if scope["method"] in BODY_METHODS and not is_json(headers.get("content-type", "")):
            error = APIError(415, "the body must be JSON, sent with 'Content-Type: application/json'",
                             code="unsupported_media_type")
            return await error.response()(scope, receive, send)
        declared = headers.get("content-length", "")
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

