"""Errors the engine raises to its callers. Every message says what was wrong and what to do."""
from __future__ import annotations


class EngineError(RuntimeError):
    """Base class for errors raised by the engine."""


class InvalidRequestError(EngineError, ValueError):
    """The request itself is bad (empty input, too long, invalid parameter). `param` names the field."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class QueueFullError(EngineError):
    """The waiting queue is full; the request was refused and nothing was queued. Retry later."""


class RequestAbortedError(EngineError):
    """The request was aborted (by `abort`, a disconnect or shutdown) before it finished."""


class EngineDeadError(EngineError):
    """The engine loop stopped (shutdown or a fatal error); no new requests are accepted."""
