"""The real RAG behind `/v1/rag`: the stack a plan builds over the server's engine, one pipeline per entry."""
from __future__ import annotations

from orthrus_rag.engine import EngineLike
from orthrus_rag.rag import Answer, Pipeline
from orthrus_rag.serving.errors import RagInputError
from orthrus_rag.serving.settings import RagSettings
from orthrus_rag.serving.state import RagFn
from orthrus_rag.stack import StackPlan


async def build_rag(engine: EngineLike, plan: StackPlan, default: str) -> RagFn:
    """Load (or build and cache) the planned index, build every planned pipeline, and return the `/v1/rag`
    callable (`default`: the pipeline of a request that names none)."""
    return _answerer((await plan.build(engine)).pipelines, default)


def pipeline_groups(settings: RagSettings) -> dict[str, dict]:
    """The request name of each pipeline served -> its `pipeline` group entry (`name` defaults to the key)."""
    entries = settings.pipelines or {settings.pipeline: {}}
    return {key: {"name": key, **entry} for key, entry in entries.items()}


def _answerer(pipelines: dict[str, Pipeline], default: str) -> RagFn:
    if default not in pipelines:
        raise ValueError(f"server.rag.pipeline {default!r} is not among server.rag.pipelines {sorted(pipelines)}")

    async def answer(question: str, pipeline: str | None) -> Answer:
        name = pipeline or default
        if name not in pipelines:
            raise RagInputError(f"unknown pipeline {name!r}; this server runs {sorted(pipelines)}", "pipeline")
        return await pipelines[name].answer(question)

    answer.pipelines = pipelines  # the /v1/rag route copies one with a request's own settings (k, max_steps)
    return answer
