"""`GET /v1/rag/pipelines` (the pipelines `/v1/rag` serves, with their settings) and `GET /v1/rag/examples` (example
questions with gold answers: the demo set, and the dataset of `server.ui.dataset`)."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends

from orthrus_rag.serving.examples import DEMO
from orthrus_rag.serving.rag_service import RagService, pipeline_groups
from orthrus_rag.serving.responses import ExampleCard, ExampleList, PipelineCard, PipelineList
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()


@router.get("/v1/rag/pipelines")
async def list_pipelines(state: ServerState = Depends(get_state)) -> PipelineList:
    built = state.rag.pipelines if isinstance(state.rag, RagService) else None
    groups = pipeline_groups(state.settings.rag)
    cards = [PipelineCard(name=name, settings=built[name].settings() if built and name in built else group)
             for name, group in groups.items()]
    return PipelineList(default=state.settings.rag.pipeline, pipelines=cards)


@router.get("/v1/rag/examples")
async def list_examples(source: Literal["demo", "dataset"] = DEMO,
                        state: ServerState = Depends(get_state)) -> ExampleList:
    cards = [ExampleCard(**row) for row in state.examples.listing(source)]
    return ExampleList(sources=sorted(state.examples.sources), source=source, data=cards)
