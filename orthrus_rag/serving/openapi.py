"""The published OpenAPI schema: every error answer a route can give, documented; FastAPI's 422 (sent as 400) not."""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from orthrus_rag.serving.errors import ErrorBody


def error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


UNAUTHORIZED = {401: error("missing or wrong API key (only when the server is started with one)")}
UNAVAILABLE = {503: error("the server is shutting down, or its engine stopped")}
API_ERRORS = {
    400: error("invalid request: a body that breaks this schema (types, ranges, required fields), malformed JSON, "
               "or what the schema cannot say: a blank input, an input longer than the context, token ids past "
               "the vocabulary, an unknown model or pipeline"),
    **UNAUTHORIZED,
    413: error("the body is larger than the server's limit (server.max_body_bytes)"),
    429: error("the engine's waiting queue is full; retry later"),
    **UNAVAILABLE,
}
RAG_ERRORS = {**API_ERRORS, 501: error("RAG is not enabled on this server")}
EVENT_STREAM = {200: {"description": "the response; with `stream: true`, server-sent events of chunks ending with "
                                     "`data: [DONE]`",
                      "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


def without_validation_422(app: FastAPI) -> None:
    """Drop the 422 answers FastAPI documents for every body: this server sends them as 400."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        return schema

    app.openapi = openapi
