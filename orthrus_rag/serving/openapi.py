"""The published OpenAPI schema: every error answer a route can give, documented; FastAPI's 422 (sent as 400) not."""
from __future__ import annotations

from typing import Any, Union

from fastapi import FastAPI
from pydantic import TypeAdapter

from orthrus_rag.serving.errors import ErrorBody
from orthrus_rag.serving.rag_stream import EVENT_TYPES
from orthrus_rag.serving.responses import ChatCompletionChunk, CompletionResponse

REF = "#/components/schemas/{model}"
STREAMED = {"/v1/completions": (CompletionResponse, ErrorBody),  # what the `data` of each stream's events can be
            "/v1/chat/completions": (ChatCompletionChunk, ErrorBody), "/v1/rag": EVENT_TYPES}


def error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


UNAUTHORIZED = {401: error("missing or wrong API key (only when the server is started with one)")}
UNAVAILABLE = {503: error("the server is shutting down, or its engine stopped or stalled")}
API_ERRORS = {
    400: error("invalid request: a body that breaks this schema (types, ranges, required fields), malformed JSON, "
               "or what the schema cannot say: a blank input, an input longer than the context, token ids past "
               "the vocabulary, an unknown model or pipeline, more inputs or messages than the server takes "
               "(server.max_embedding_inputs, server.max_chat_messages), a Host header the server does not answer "
               "for (server.allowed_hosts)"),
    **UNAUTHORIZED,
    413: error("the body is larger than the server's limit (server.max_body_bytes)"),
    415: error("the body is not sent as JSON (Content-Type: application/json)"),
    429: error("the engine's waiting queue is full, or this key has server.max_concurrent_per_key requests in "
               "flight; retry later"),
    504: error("the request ran past its deadline (server.request_timeout_s or its `timeout`) and was stopped"),
    **UNAVAILABLE,
}
RAG_ERRORS = {**API_ERRORS, 501: error("RAG is not enabled on this server")}
EVENT_STREAM = {200: {"description": "the response; with `stream: true`, server-sent events: one chunk per `data:` "
                                     "line (an error object if generation fails mid-stream), then `data: [DONE]`"}}
RAG_STREAM = {200: {"description": "the answer; with `stream: true`, server-sent events, one JSON event per `data:` "
                                   "line, told apart by `type`: `start`; per retrieval or reasoning call a "
                                   "`call_start`, the reasoning text in `text` pieces as it is generated, and a "
                                   "`retrieval` (query, passages with titles and scores) or `reasoning` (text, tokens) "
                                   "with where its time went; last an `answer` (this response's fields, `latency_s`, "
                                   "`timeline`, `score` when the request named an `example`) or an `error`; then "
                                   "`data: [DONE]`. Times are seconds since the question started."}}


def install_openapi(app: FastAPI) -> None:
    """The schema FastAPI builds, with the event streams described and without the 422s (sent as 400)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        for path, types in STREAMED.items():  # an event's `data`: `[DONE]` or the JSON of one of `types`
            one = TypeAdapter(Union[types]).json_schema(ref_template=REF, mode="serialization")
            for name, definition in one.pop("$defs", {}).items():
                components.setdefault(name, definition)
            json_data = {"not": {"const": "[DONE]"}, "contentMediaType": "application/json", "contentSchema": one}
            event = {"type": "object", "required": ["data"],
                     "properties": {"data": {"oneOf": [{"const": "[DONE]"}, json_data]}}}
            schema["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"] = {"schema": event}
        return schema

    app.openapi = openapi

