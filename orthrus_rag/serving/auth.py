"""The API key: with `server.api_key` set, every route but `/health` needs `Authorization: Bearer <key>` (`/metrics`
and the web page's files too, unless `server.metrics_public` / `server.ui.public`). Checked from the headers alone,
before anything reads the body, so a request without the key holds no slot and costs no parsing."""
from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from orthrus_rag.serving.errors import APIError


def has_key(authorization: str, expected: str) -> bool:
    """Whether an Authorization header's value is `Bearer <expected>` (the scheme in any case)."""
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


class AuthMiddleware:
    def __init__(self, app: ASGIApp, api_key: str | None, metrics_public: bool, ui_public: bool):
        self.app, self.api_key = app, api_key
        self.public = {"/health"} | ({"/metrics"} if metrics_public else set()) | ({"/"} if ui_public else set())
        self.public_prefix = "/web/" if ui_public else None  # the page's modules (routes/web.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or self.api_key is None or path in self.public or (
                self.public_prefix and path.startswith(self.public_prefix)) or has_key(
                Headers(scope=scope).get("authorization", ""), self.api_key):
            return await self.app(scope, receive, send)
        error = APIError(401, "missing or incorrect API key: send 'Authorization: Bearer <key>'",
                         "authentication_error", code="invalid_api_key")
        await error.response()(scope, receive, send)
