"""A pipeline's trace, live: each retrieval and reasoning call handed to a listener as it happens.

`listening(send)` wraps the answering of one question; inside it, `Pipeline.retrieve` and `Pipeline.reason` send
a `CallStarted` when a call begins, the reasoning text as the engine generates it (`TextDelta`), and a `Retrieved`
or `Reasoned` when the call ends, with where its time went (waiting in the engine's queue, in the engine, outside
it). Times are seconds since listening began. Without a listener nothing is sent and nothing is watched.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from orthrus_rag.engine.observe import observing
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.request import GenerateOutput
from orthrus_rag.rag.reasoner import Reasoning
from orthrus_rag.rag.types import Passage, TraceKind


@dataclass
class CallStarted:
    call: int  # numbers the calls of one question, from 0, in the order they start
    kind: TraceKind
    input: str  # the query, or the end of the prompt's last message
    start_s: float
    type: Literal["call_start"] = "call_start"


@dataclass
class TextDelta:
    call: int
    text: str  # the next piece of the reasoning call's generated text
    type: Literal["text"] = "text"


@dataclass
class Retrieved:
    call: int
    query: str
    passages: list[Passage]  # best first, with their scores
    start_s: float
    end_s: float
    query_tokens: int
    queue_s: float  # the query's embedding waited for an engine step
    embed_s: float  # from its first step to its vector
    search_s: float  # the rest: tokenising, searching the index, fusing
    type: Literal["retrieval"] = "retrieval"


@dataclass
class Reasoned:
    call: int
    text: str
    start_s: float
    end_s: float
    prompt_tokens: int
    completion_tokens: int
    queue_s: float  # the generation waited for an engine step
    prefill_s: float  # from its first step to its first token
    decode_s: float  # from its first token to its last
    type: Literal["reasoning"] = "reasoning"


LiveEvent = CallStarted | TextDelta | Retrieved | Reasoned
Listener = Callable[[LiveEvent], None]


@dataclass
class _Live:
    send: Listener
    start: float = field(default_factory=time.perf_counter)
    calls: Iterator[int] = field(default_factory=itertools.count)


_LIVE: ContextVar[_Live | None] = ContextVar("orthrus_rag_live", default=None)


@contextlib.contextmanager
def listening(send: Listener) -> Iterator[None]:
    """Send the live events of the calls made inside this block (in this task and the tasks it starts) to `send`."""
    token = _LIVE.set(_Live(send))
    try:
        yield
    finally:
        _LIVE.reset(token)


class Watch:
    """One retrieval or reasoning call; with no listener every method does nothing. Where its engine requests spent
    their time (`queue_s`, `busy_s`, of which `prefill_s`) is summed over the requests."""

    def __init__(self, live: _Live | None, kind: TraceKind, input: str):
        self.live, self.kind, self.input = live, kind, input
        self.call = next(live.calls) if live else -1
        self.start = time.perf_counter()
        self.queue_s = self.busy_s = self.prefill_s = 0.0

    def on_output(self, out: StepOutput) -> None:
        if out.delta_text and self.kind == "reason":
            self.live.send(TextDelta(self.call, out.delta_text))
        timings = getattr(out.result, "timings", None) if out.finished else None
        if timings is None or timings.first_scheduled is None or timings.finished is None:
            return
        self.queue_s += timings.first_scheduled - timings.arrival
        self.busy_s += timings.finished - timings.first_scheduled
        if isinstance(out.result, GenerateOutput) and timings.first_token is not None:
            self.prefill_s += timings.first_token - timings.first_scheduled

    def retrieved(self, passages: list[Passage], query_tokens: int) -> None:
        if self.live is None:
            return
        start, end = self.start - self.live.start, time.perf_counter() - self.live.start
        search_s = max(0.0, end - start - (self.queue_s + self.busy_s))
        self.live.send(Retrieved(self.call, self.input, list(passages), start, end, query_tokens, self.queue_s,
                                 self.busy_s, search_s))

    def reasoned(self, out: Reasoning) -> None:
        if self.live is None:
            return
        start, end = self.start - self.live.start, time.perf_counter() - self.live.start
        self.live.send(Reasoned(self.call, out.text, start, end, out.prompt_tokens, out.completion_tokens,
                                self.queue_s, self.prefill_s, self.busy_s - self.prefill_s))


@contextlib.contextmanager
def watch(kind: TraceKind, input: str) -> Iterator[Watch]:
    """Watch one call made inside the block: its start is sent now, its engine outputs observed."""
    live = _LIVE.get()
    call = Watch(live, kind, input)
    if live is not None:
        live.send(CallStarted(call.call, kind, input, call.start - live.start))
    with observing(call.on_output) if live is not None else contextlib.nullcontext():
        yield call
