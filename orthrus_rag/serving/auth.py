"""Optional bearer-token check for the API routes."""
from __future__ import annotations

import hmac

from fastapi import Request

from orthrus_rag.serving.errors import APIError


def require_api_key(request: Request) -> None:
    """A FastAPI dependency: when the server has an API key, the request must send `Authorization: Bearer <key>`."""
    expected = request.app.state.server.settings.api_key
    if expected is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise APIError(401, "missing or incorrect API key: send 'Authorization: Bearer <key>'",
                       "authentication_error", code="invalid_api_key")
