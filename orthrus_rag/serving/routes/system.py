"""`GET /v1/models`, `/health` and `/metrics`."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from orthrus_rag.serving.auth import require_api_key
from orthrus_rag.serving.errors import APIError
from orthrus_rag.serving.openapi import UNAUTHORIZED, UNAVAILABLE
from orthrus_rag.serving.responses import Health, ModelCard, ModelList
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()
_STARTED = int(time.time())


@router.get("/v1/models", dependencies=[Depends(require_api_key)], responses={**UNAUTHORIZED, **UNAVAILABLE})
async def list_models(state: ServerState = Depends(get_state)) -> ModelList:
    cards = [ModelCard(id=state.generator_name, created=_STARTED, kind="generator")]
    if state.embedder_name:
        cards.append(ModelCard(id=state.embedder_name, created=_STARTED, kind="embedder"))
    return ModelList(data=cards)


@router.get("/health", responses=UNAVAILABLE)
async def health(state: ServerState = Depends(get_state)) -> Health:
    """200 while the engine serves; 503 `engine_unavailable` with the reason when it is dead or stalled."""
    reason = state.engine.health()
    if reason is not None:
        raise APIError(503, f"the engine cannot serve: {reason}", "server_error", code="engine_unavailable")
    stats = state.engine.stats()
    return Health(running=stats.get("running", 0), waiting=stats.get("waiting", {}))


@router.get("/metrics", response_class=PlainTextResponse, responses=UNAVAILABLE)
async def metrics(state: ServerState = Depends(get_state)) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
