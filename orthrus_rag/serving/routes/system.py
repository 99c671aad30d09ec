"""`GET /v1/engine/steps` (the engine's step log, for the web page's engine view), `/v1/models`, `/health` and
`/metrics`: what the server runs and how it is doing."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from orthrus_rag.serving.errors import APIError
from orthrus_rag.serving.openapi import UNAUTHORIZED, UNAVAILABLE
from orthrus_rag.serving.responses import EngineSteps, Health, ModelCard, ModelList, ReplicaSteps
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()
GUARDED = {"responses": {**UNAUTHORIZED, **UNAVAILABLE}}
_STARTED = int(time.time())
MAX_STEPS = 4096


@router.get("/v1/engine/steps", **GUARDED)
async def engine_steps(since: int = Query(0, ge=0, description="only steps with a larger id"),
                       limit: int = Query(256, ge=1, le=MAX_STEPS, description="the newest this many at most"),
                       state: ServerState = Depends(get_state)) -> EngineSteps:
    """Each engine's steps with an id above `since`, oldest first (ids count each engine's steps from 1). With
    Ray Serve replicas, one list per replica, as of the replicas' last report."""
    by_engine = state.engine.step_logs(since, limit)
    return EngineSteps(replicas=[ReplicaSteps(replica=name, steps=steps) for name, steps in sorted(by_engine.items())])


@router.get("/v1/models", **GUARDED)
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
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
