"""Optional bearer-token check for the API routes."""
from __future__ import annotations

import hmac

from fastapi import Request

from orthrus_rag.serving.errors import APIError


def has_key(authorization: str, expected: str) -> bool:
    """Whether an Authorization header's value is `Bearer <expected>` (the scheme in any case)."""
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


def require_api_key(request: Request) -> None:
    """A FastAPI dependency: when the server has an API key, the request must send `Authorization: Bearer <key>`."""
    expected = request.app.state.server.settings.api_key
    if expected is not None and not has_key(request.headers.get("authorization", ""), expected):
        raise APIError(401, "missing or incorrect API key: send 'Authorization: Bearer <key>'",
                       "authentication_error", code="invalid_api_key")
