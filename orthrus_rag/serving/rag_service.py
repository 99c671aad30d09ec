"""The real RAG behind `/v1/rag`: the stack a plan builds over the server's engine, one pipeline per entry."""
from __future__ import annotations

from dataclasses import dataclass

from orthrus_rag.engine import EngineLike
from orthrus_rag.rag import Answer, Pipeline
from orthrus_rag.serving.errors import RagInputError
from orthrus_rag.serving.settings import RagSettings
from orthrus_rag.serving.state import RagFn
from orthrus_rag.stack import StackPlan


async def build_rag(engine: EngineLike, plan: StackPlan, default: str) -> RagFn:
    """Load (or build and cache) the planned index, build every planned pipeline, and return the `/v1/rag`
    callable (`default`: the pipeline of a request that names none)."""
    return RagService((await plan.build(engine)).pipelines, default)


def pipeline_groups(settings: RagSettings) -> dict[str, dict]:
    """The request name of each pipeline served -> its `pipeline` group entry (`name` defaults to the key)."""
    entries = settings.pipelines or {settings.pipeline: {}}
    return {key: {"name": key, **entry} for key, entry in entries.items()}


@dataclass
class RagService:
    """The pipelines `/v1/rag` serves by request name, and the one a request that names none gets; called as the
    server's RAG callable. The route copies a pipeline with a request's own settings (k, max_steps) from here."""

    pipelines: dict[str, Pipeline]
    default: str  # one of `pipelines` (RagSettings checks server.rag.pipeline)

    def pipeline(self, name: str | None) -> Pipeline:
        name = name or self.default
        if name not in self.pipelines:
            raise RagInputError(f"unknown pipeline {name!r}; this server runs {sorted(self.pipelines)}", "pipeline")
        return self.pipelines[name]

    async def __call__(self, question: str, pipeline: str | None) -> Answer:
        return await self.pipeline(pipeline).answer(question)
