"""One engine replica: an AsyncEngine and the `/v1/rag` pipelines over it, as the Ray Serve ingress calls them.

Plain Python (no Ray here): `orthrus_rag/serving/ray_serve.py` deploys it. Each method is one engine call; when the
ingress cancels a call (its client went away), Ray Serve cancels the coroutine running here, and the engine aborts
the request on that cancellation (`AsyncEngine` aborts whatever its caller stops waiting for), freeing its KV blocks.
"""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from orthrus_rag.engine import EmbedOutput, GenerateOutput, PoolingParams, SamplingParams
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.protocol import Prompt
from orthrus_rag.rag import Answer
from orthrus_rag.serving.state import RagFn
from orthrus_rag.stack import StackPlan


@dataclass
class ReplicaSpec:
    """What every replica builds: the planned engine and `/v1/rag` stack, and the pipeline a request that names
    none gets (None: `/v1/rag` is off)."""

    plan: StackPlan
    rag: str | None


@dataclass
class ReplicaInfo:
    """What the ingress needs to know of the engines behind it (every replica has the same)."""

    tokenizer: Any  # the generator's tokenizer (its chat template renders chat prompts on the ingress)
    embedding_dims: dict[str | None, int]  # embedding size by PoolingParams.model: None and "backbone"
    context_length: int  # the generator's, in tokens


class EngineReplica:
    def __init__(self, spec: ReplicaSpec):
        self.spec = spec
        self.engine = spec.plan.start_engine()
        self._rag: RagFn | None = None

    async def start_rag(self) -> None:
        """Load (or build, once per machine) the index and the pipelines behind `/v1/rag`."""
        if self.spec.rag is None:
            return
        from orthrus_rag.cluster import index_lock
        from orthrus_rag.serving.rag_service import build_rag

        with index_lock():
            self._rag = await build_rag(self.engine, self.spec.plan, self.spec.rag)

    def info(self) -> ReplicaInfo:
        dims = {model: self.engine.embedding_dim(model) for model in (None, "backbone")}
        return ReplicaInfo(self.engine.tokenizer, dims, self.engine.context_length)

    async def generate(self, prompt: Prompt, params: SamplingParams) -> GenerateOutput:
        return await self.engine.generate(prompt, params)

    async def stream_outputs(self, prompt: Prompt, params: SamplingParams) -> AsyncIterator[StepOutput]:
        async with contextlib.aclosing(self.engine.stream_outputs(prompt, params)) as outputs:
            async for out in outputs:  # closed here when the ingress stops reading: the engine aborts the request
                yield out

    async def embed(self, input: Prompt, params: PoolingParams) -> EmbedOutput:
        return await self.engine.embed(input, params)

    async def rag(self, question: str, pipeline: str | None) -> Answer:
        """Called by the ingress only when the spec serves RAG, on a replica whose constructor ran `start_rag`."""
        return await self._rag(question, pipeline)

    def check_health(self) -> None:
        """Ray Serve's periodic probe: raising marks the replica unhealthy, and Ray Serve replaces it."""
        reason = self.engine.health()
        if reason is not None:
            raise RuntimeError(f"the engine replica cannot serve: {reason}")
