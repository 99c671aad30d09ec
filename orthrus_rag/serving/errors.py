"""OpenAI-style error bodies, and the mapping from every failure to its HTTP status."""
from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from orthrus_rag.engine import EngineDeadError, EngineError, InvalidRequestError, QueueFullError, RequestAbortedError

log = logging.getLogger("orthrus_rag.serving")

_HTTP_KINDS = {404: ("not_found_error", "not_found"), 405: ("invalid_request_error", "method_not_allowed"),
               413: ("invalid_request_error", "request_too_large")}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    """Every non-2xx answer: `{"error": {"message", "type", "param", "code"}}`, as the OpenAI API sends."""

    error: ErrorDetail


class ErrorResponse(JSONResponse):
    """JSON escaped to ASCII, so that any text a client sent (a lone surrogate included) can be echoed back."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


class APIError(Exception):
    """A failure to report to the client as `{"error": {...}}` with `status`."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return ErrorResponse(self.body(), status_code=self.status, headers=headers)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class RagInputError(ValueError):
    """Raised by a RAG callable for a bad request (e.g. an unknown pipeline): answered with a 400."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def as_api_error(err: Exception) -> APIError:
    """The client-facing form of any exception raised while serving a request."""
    if isinstance(err, APIError):
        return err
    if isinstance(err, RequestValidationError):
        return validation_error(err)
    if isinstance(err, StarletteHTTPException):
        kind, code = _HTTP_KINDS.get(err.status_code, ("invalid_request_error", None))
        return APIError(err.status_code, str(err.detail), kind, code=code)
    if isinstance(err, (InvalidRequestError, RagInputError)):
        return bad_request(str(err), err.param)
    if isinstance(err, QueueFullError):
        return APIError(429, str(err), "rate_limit_error", code="queue_full")
    if isinstance(err, EngineDeadError):
        return APIError(503, str(err), "server_error", code="engine_unavailable")
    if isinstance(err, RequestAbortedError):
        return APIError(503, str(err), "server_error", code="unavailable")
    log.error("unexpected error while serving a request", exc_info=err)
    return APIError(500, f"internal server error ({type(err).__name__}); the request failed, the server is still "
                         "running", "server_error", code="internal_error")


def validation_error(err: RequestValidationError) -> APIError:
    """FastAPI's 422 as a 400 naming the bad field, with the most telling of pydantic's errors: for a field that
    takes one of several types, pydantic reports a failure per type, so a value of the right type that breaks a
    constraint goes before a value of the wrong type, then the error found deepest (max keeps the first of equals:
    pydantic's own order)."""
    first = max(err.errors(), default={}, key=lambda e: (not e.get("type", "").endswith("_type"),
                                                         len(_field_path(e.get("loc", ())))))
    if first.get("type") == "json_invalid":
        where = f" at character {first['loc'][-1]}" if len(first.get("loc", ())) > 1 else ""
        return bad_request(f"the body is not valid JSON{where}: {first.get('ctx', {}).get('error', 'malformed')}")
    loc = _field_path(first.get("loc", ()))
    param = loc[0] if loc and not loc[0].isdigit() else None  # the top-level field, as OpenAI reports it
    where = f" at '{'.'.join(loc)}'" if loc else " (the body must be a JSON object)"
    return bad_request(f"invalid request{where}: {first.get('msg', 'malformed body')}", param)


def _field_path(loc: tuple) -> list[str]:
    """The location without "body" and without pydantic's labels for the alternatives of a union (`str`,
    `list[int]`, `function-after[...]`, a model's class name)."""
    return [str(p) for p in loc if p != "body" and (isinstance(p, int) or not _union_label(p))]


def _union_label(part: str) -> bool:
    return any(c in part for c in "[-") or part in ("str", "int", "float", "bool", "none") or part[:1].isupper()


def install_error_handlers(app: FastAPI) -> None:
    async def on_error(_: Request, err: Exception) -> ErrorResponse:
        return as_api_error(err).response()

    # expected failures are answered without a traceback in the log; anything else (Exception) gets a 500 for this
    # request only, and is logged
    for known in (RequestValidationError, StarletteHTTPException, APIError, EngineError, RagInputError, Exception):
        app.add_exception_handler(known, on_error)
