"""OpenAI-style error bodies, and the mapping from every failure to its HTTP status."""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from orthrus_rag.engine import EngineDeadError, EngineError, InvalidRequestError, QueueFullError, RequestAbortedError

log = logging.getLogger("orthrus_rag.serving")


_HTTP_KINDS = {404: ("not_found_error", "not_found"), 405: ("invalid_request_error", "method_not_allowed"),
               413: ("invalid_request_error", "request_too_large")}


class APIError(Exception):
    """A failure to report to the client as `{"error": {...}}` with `status`."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)

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
    if isinstance(err, InvalidRequestError):
        return bad_request(str(err), err.param)
    if isinstance(err, QueueFullError):
        return APIError(429, str(err), "rate_limit_error", code="queue_full")
    if isinstance(err, (EngineDeadError, RequestAbortedError)):
        return APIError(503, str(err), "server_error", code="unavailable")
    log.error("unexpected error while serving a request", exc_info=err)
    return APIError(500, f"internal server error ({type(err).__name__}); the request failed, the server is still "
                         "running", "server_error", code="internal_error")


def validation_error(err: RequestValidationError) -> APIError:
    """FastAPI's 422 as a 400 naming the first bad field."""
    first = err.errors()[0] if err.errors() else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = loc[0] if loc and not loc[0].isdigit() else None  # the top-level field, as OpenAI reports it
    where = f" at '{'.'.join(loc)}'" if loc else ""
    return bad_request(f"invalid request{where}: {first.get('msg', 'malformed body')}", param)


def install_error_handlers(app: FastAPI) -> None:
    async def on_validation(_: Request, err: RequestValidationError) -> JSONResponse:
        return validation_error(err).response()

    async def on_http(_: Request, err: StarletteHTTPException) -> JSONResponse:
        kind, code = _HTTP_KINDS.get(err.status_code, ("invalid_request_error", None))
        return APIError(err.status_code, str(err.detail), kind, code=code).response()

    async def on_known(_: Request, err: Exception) -> JSONResponse:
        return as_api_error(err).response()

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    for known in (APIError, EngineError):  # expected failures: answered without a traceback in the log
        app.add_exception_handler(known, on_known)
    app.add_exception_handler(Exception, on_known)  # anything else: a 500 for this request only (logged)
