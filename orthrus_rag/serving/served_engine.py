"""`ServedEngine`: the engine as the server sees it, every member the app, its routes and middlewares use.

`AsyncEngine` (one engine in this process) and the Ray Serve `ReplicaClient` (engine replicas behind an ingress,
serving/ray_serve.py) both implement it; tests/serving/test_served_engine.py fails when either lacks a member.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from orthrus_rag.engine import EngineConfig, EngineLike, SamplingParams
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.protocol import Prompt
from orthrus_rag.engine.step_log import StepRecord


@runtime_checkable
class ServedEngine(EngineLike, Protocol):
    """EngineLike (tokenizer, generate, embed, stats) and what serving adds."""

    config: EngineConfig  # the served model names come from it
    context_length: int  # the generator's, in tokens: prompt and output together

    def stream_outputs(self, prompt: Prompt, params: SamplingParams | None = None) -> AsyncIterator[StepOutput]: ...

    def embedding_dim(self, model: str | None = None) -> int: ...

    def health(self) -> str | None: ...  # why it cannot serve, or None

    def step_logs(self, since: int = 0, limit: int | None = None) -> dict[str, list[StepRecord]]: ...  # by engine

    def shutdown(self) -> None: ...  # after the app's last request
