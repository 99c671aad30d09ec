"""`POST /v1/rag`: answer one question with a RAG pipeline -> {answer, passages, trace}, or with `stream: true`
the trace as it happens (server-sent events, orthrus_rag/serving/rag_stream.py); and the listings behind it,
`GET /v1/rag/pipelines` and `GET /v1/rag/examples`."""
from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import APIRouter, Depends, Request

from orthrus_rag.rag import Answer
from orthrus_rag.serving.errors import APIError, bad_request
from orthrus_rag.serving.examples import DEMO
from orthrus_rag.serving.limits import SCOPE_KEY, shorten_deadline
from orthrus_rag.serving.openapi import RAG_ERRORS, RAG_STREAM, UNAUTHORIZED, UNAVAILABLE
from orthrus_rag.serving.rag_service import RagService, pipeline_groups
from orthrus_rag.serving.rag_stream import STREAM_GRACE_S, rag_events
from orthrus_rag.serving.requests import RagRequest
from orthrus_rag.serving.responses import ExampleCard, ExampleList, PipelineCard, PipelineList, RagResponse
from orthrus_rag.serving.sse import sse_response
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()


@router.post("/v1/rag", response_model=RagResponse, responses={**RAG_ERRORS, **RAG_STREAM})
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
    pipeline = state.rag.pipeline(req.pipeline)
    names = {f.name for f in dataclasses.fields(pipeline)}  # overrides it has no setting for are ignored
    try:
        pipeline = dataclasses.replace(pipeline, **{k: v for k, v in overrides.items() if k in names})
    except ValueError as err:
        raise bad_request(f"pipeline settings refused: {err}", next(iter(overrides))) from err
    return lambda: pipeline.answer(req.question)


@router.get("/v1/rag/pipelines", responses={**UNAUTHORIZED, **UNAVAILABLE})
async def list_pipelines(state: ServerState = Depends(get_state)) -> PipelineList:
    built = state.rag.pipelines if isinstance(state.rag, RagService) else None
    cards = [PipelineCard(name=name, settings=built[name].settings() if built and name in built else group)
             for name, group in pipeline_groups(state.settings.rag).items()]
    return PipelineList(default=state.settings.rag.pipeline, pipelines=cards)


@router.get("/v1/rag/examples", responses={**UNAUTHORIZED, **UNAVAILABLE})
async def list_examples(source: Literal["demo", "dataset"] = DEMO,
                        state: ServerState = Depends(get_state)) -> ExampleList:
    cards = [ExampleCard(**row) for row in state.examples.listing(source)]
    return ExampleList(sources=sorted(state.examples.sources), source=source, data=cards)
