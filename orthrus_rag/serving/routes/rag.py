"""`POST /v1/rag`: answer one question with a RAG pipeline -> {answer, passages, trace}, or with `stream: true`
the trace as it happens (server-sent events, orthrus_rag/serving/rag_events.py)."""
from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Depends, Request

from orthrus_rag.rag import Answer, Pipeline
from orthrus_rag.serving.errors import APIError, bad_request
from orthrus_rag.serving.limits import SCOPE_KEY, shorten_deadline
from orthrus_rag.serving.openapi import RAG_STREAM
from orthrus_rag.serving.rag_service import RagService
from orthrus_rag.serving.rag_stream import STREAM_GRACE_S, rag_events
from orthrus_rag.serving.requests import RagRequest
from orthrus_rag.serving.responses import RagResponse
from orthrus_rag.serving.sse import sse_response
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()


@router.post("/v1/rag", response_model=RagResponse, responses=RAG_STREAM)
async def rag(req: RagRequest, request: Request, state: ServerState = Depends(get_state)):
    shorten_deadline(request, req.timeout)
    if state.rag is None:
        raise APIError(501, "RAG is not enabled on this server (start it with server.rag.enabled=true)",
                       "invalid_request_error", code="rag_disabled")
    if not req.question.strip():
        raise bad_request("question is empty", "question")
    answer = _answerer(state, req)
    if req.stream:
        example = state.examples.find(req.example) if req.example else None
        deadline = request.scope.get(SCOPE_KEY)
        if deadline:
            deadline.grace_s = STREAM_GRACE_S
        return sse_response(rag_events(answer, req.question, req.pipeline or state.settings.rag.pipeline, example,
                                       deadline.remaining() if deadline else None))
    return RagResponse.of(await answer())


def _answerer(state: ServerState, req: RagRequest) -> Callable[[], Awaitable[Answer]]:
    """What answers this request: the server's RAG callable, or the named pipeline with the request's settings."""
    overrides = req.overrides()
    if not overrides:
        return lambda: state.rag(req.question, req.pipeline)
    if not isinstance(state.rag, RagService):  # replicas or a stand-in: pipelines live elsewhere
        raise bad_request("this server cannot change k or max_steps per request", next(iter(overrides)))
    pipeline = with_settings(state.rag.pipeline(req.pipeline), overrides)
    return lambda: pipeline.answer(req.question)


def with_settings(pipeline: Pipeline, overrides: dict[str, int]) -> Pipeline:
    """A copy of `pipeline` with those of `overrides` it has as settings (others are ignored)."""
    names = {f.name for f in dataclasses.fields(pipeline)}
    try:
        return dataclasses.replace(pipeline, **{k: v for k, v in overrides.items() if k in names})
    except ValueError as err:
        raise bad_request(f"pipeline settings refused: {err}", next(iter(overrides))) from err
