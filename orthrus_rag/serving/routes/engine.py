"""`GET /v1/engine/steps`: the engine's last steps (its step log), after a step id, for the web page's engine view."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from orthrus_rag.engine import AsyncEngine
from orthrus_rag.serving.responses import EngineSteps, ReplicaSteps
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()
MAX_STEPS = 4096


@router.get("/v1/engine/steps")
async def engine_steps(since: int = Query(0, ge=0, description="only steps with a larger id"),
                       limit: int = Query(256, ge=1, le=MAX_STEPS, description="the newest this many at most"),
                       state: ServerState = Depends(get_state)) -> EngineSteps:
    """Each engine's steps with an id above `since`, oldest first (ids count each engine's steps from 1). With
    Ray Serve replicas, one list per replica, as of the replicas' last report."""
    if isinstance(state.engine, AsyncEngine):
        by_engine = {"engine": state.engine.steps(since, limit)}
    else:  # Ray Serve's replicas, as of their last report
        by_engine = state.engine.replica_steps(since, limit)
    return EngineSteps(replicas=[ReplicaSteps(replica=name, steps=steps) for name, steps in sorted(by_engine.items())])
