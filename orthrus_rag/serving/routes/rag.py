"""`POST /v1/rag`: answer one question with a RAG pipeline -> {answer, passages, trace}."""
from __future__ import annotations

from fastapi import APIRouter, Depends

from orthrus_rag.serving.errors import APIError, bad_request
from orthrus_rag.serving.requests import RagRequest
from orthrus_rag.serving.responses import RagResponse
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()


class RagInputError(ValueError):
    """Raised by a RAG callable for a bad request (e.g. an unknown pipeline): answered with a 400."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@router.post("/v1/rag")
async def rag(req: RagRequest, state: ServerState = Depends(get_state)) -> RagResponse:
    if state.rag is None:
        raise APIError(501, "RAG is not enabled on this server (start it with server.rag.enabled=true)",
                       "invalid_request_error", code="rag_disabled")
    if not req.question.strip():
        raise bad_request("question is empty", "question")
    try:
        result = await state.rag(req.question, req.pipeline)
    except RagInputError as err:
        raise bad_request(str(err), err.param) from err
    return RagResponse.model_validate(result)
