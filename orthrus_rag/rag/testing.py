"""Scripted stand-ins for a retriever and a reasoner, to test a pipeline's logic without models.

Both record every call in order, can take a delay (to exercise concurrency), and count how many calls
are in flight at once.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag.reasoner import Prompt, Reasoner, Reasoning, as_messages
from orthrus_rag.rag.retriever import Retriever
from orthrus_rag.rag.types import Passage


@dataclass
class Call:
    """One recorded call: what was asked (a query or the prompt's messages) and its parameters."""

    kind: str  # "retrieve" | "reason"
    input: str | list[dict[str, str]]
    params: object


@dataclass
class _InFlight:
    now: int = 0
    peak: int = 0

    async def hold(self, delay: float) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(delay)
        finally:
            self.now -= 1


class ScriptedReasoner(Reasoner):
    """Returns scripted texts: in order from a list, or from a function of the last message's content."""

    def __init__(self, script: Sequence[str] | Callable[[str], str], delay: float = 0.0):
        self.script = script if callable(script) else list(script)
        self.delay = delay
        self.calls: list[Call] = []
        self.in_flight = _InFlight()

    async def reason(self, prompt: Prompt, params: SamplingParams) -> str:
        return (await self.reason_with_usage(prompt, params)).text

    async def reason_with_usage(self, prompt: Prompt, params: SamplingParams) -> Reasoning:
        messages = as_messages(prompt)
        self.calls.append(Call("reason", messages, params))
        await self.in_flight.hold(self.delay)
        last = messages[-1]["content"]
        if callable(self.script):
            text = self.script(last)
        elif self.script:
            text = self.script.pop(0)
        else:
            raise AssertionError(f"ScriptedReasoner ran out of outputs at call {len(self.calls)}")
        return Reasoning(text, prompt_tokens=len(last.split()), completion_tokens=len(text.split()))


class ScriptedRetriever(Retriever):
    """Returns scripted passages for known queries, and made-up ones (`<query>#<i>`) for any other."""

    def __init__(self, results: Mapping[str, list[Passage]] | None = None, delay: float = 0.0):
        self.results = dict(results or {})
        self.delay = delay
        self.calls: list[Call] = []
        self.in_flight = _InFlight()

    async def retrieve(self, query: str, k: int) -> list[Passage]:
        self.calls.append(Call("retrieve", query, k))
        await self.in_flight.hold(self.delay)
        if query in self.results:
            return self.results[query][:k]
        return [Passage(f"{query}#{i}", f"{query} {i}", f"text {i} for {query}") for i in range(k)]

    @property
    def queries(self) -> list[str]:
        return [str(call.input) for call in self.calls]


def passages(*ids: str) -> list[Passage]:
    """Passages with the given ids (titles and texts made from them)."""
    return [Passage(i, f"Title {i}", f"Text of {i}.") for i in ids]


__all__ = ["Call", "ScriptedReasoner", "ScriptedRetriever", "passages"]
