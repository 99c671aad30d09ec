"""`EngineLike`: the engine as the layers above see it (retrievers, reasoners, index builds, benchmarks).

`AsyncEngine` satisfies it, and so does each benchmark backend (eval/bench/backends.py) that stands in for it.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from orthrus_rag.engine.request import EmbedOutput, GenerateOutput, PoolingParams, SamplingParams

Prompt = str | list[int]  # text, or token ids


@runtime_checkable
class EngineLike(Protocol):
    """Generation, embedding, the generator's tokenizer (its chat template) and the engine's counters."""

    @property
    def tokenizer(self) -> Any: ...

    async def generate(self, prompt: Prompt, params: SamplingParams | None = None) -> GenerateOutput: ...

    async def embed(self, input: Prompt, params: PoolingParams | None = None) -> EmbedOutput: ...

    def stats(self) -> dict[str, Any]: ...
