"""`POST /v1/rag`: answer one question with a RAG pipeline -> {answer, passages, trace}."""
from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Depends, Request

from orthrus_rag.rag import Answer
from orthrus_rag.serving.errors import APIError, RagInputError, bad_request
from orthrus_rag.serving.requests import RagRequest
from orthrus_rag.serving.responses import RagResponse
from orthrus_rag.serving.limits import shorten_deadline
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()


@router.post("/v1/rag")
async def rag(req: RagRequest, request: Request, state: ServerState = Depends(get_state)) -> RagResponse:
    shorten_deadline(request, req.timeout)
    if state.rag is None:
        raise APIError(501, "RAG is not enabled on this server (start it with server.rag.enabled=true)",
                       "invalid_request_error", code="rag_disabled")
    if not req.question.strip():
        raise bad_request("question is empty", "question")
    try:
        return rag_response(await state.rag(req.question, req.pipeline))
    except RagInputError as err:
        raise bad_request(str(err), err.param) from err


def rag_response(answer: Answer) -> RagResponse:
    """A pipeline's Answer as the response body: its prediction, passages and trace (with each call's duration)."""
    trace = [{**dataclasses.asdict(e), "duration_s": e.duration_s} for e in answer.trace]
    return RagResponse(answer=answer.prediction, passages=[dataclasses.asdict(p) for p in answer.passages],
                       trace=trace)
