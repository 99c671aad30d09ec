"""The events of a streamed `/v1/rag` answer (`"stream": true`), in the order they come:

    start                              once: the question and the pipeline answering it
    call_start                         a retrieval or reasoning call begins (`call` numbers them from 0)
    text                               a piece of a reasoning call's text, as the engine generates it
    retrieval | reasoning              the call ended: passages with titles and scores / the whole text, tokens,
                                       and where its time went
    answer                             once, last: the non-streamed response's fields (answer, passages, trace),
                                       the latency, the time line, and the score when the request named an example
    error                              instead of `answer` when answering failed (the OpenAI error object)

then `data: [DONE]`. Times are seconds since the question started.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from orthrus_rag.rag.live import CallStarted, LiveEvent, Reasoned, Retrieved, TextDelta
from orthrus_rag.serving.errors import ErrorDetail
from orthrus_rag.serving.examples import Score


class StartEvent(BaseModel):
    type: Literal["start"] = "start"
    question: str
    pipeline: str


@dataclass
class Timeline:
    """Where the question's time went, summed over its calls: engine queue, embedding, search (everything of a
    retrieval outside the engine), prefill, decode, and the rest (the pipeline's own work, calls overlapping)."""

    queue_s: float = 0.0
    embed_s: float = 0.0
    search_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    other_s: float = 0.0
    total_s: float = 0.0

    def add(self, event: LiveEvent) -> None:
        if isinstance(event, Retrieved):
            self.queue_s += event.queue_s
            self.embed_s += event.embed_s
            self.search_s += event.search_s
        elif isinstance(event, Reasoned):
            self.queue_s += event.queue_s
            self.prefill_s += event.prefill_s
            self.decode_s += event.decode_s

    def close(self, total_s: float) -> Timeline:
        spent = self.queue_s + self.embed_s + self.search_s + self.prefill_s + self.decode_s
        self.total_s, self.other_s = total_s, max(0.0, total_s - spent)
        return self


class AnswerEvent(BaseModel):
    type: Literal["answer"] = "answer"
    answer: str
    passages: list[dict[str, Any]] = []
    trace: list[dict[str, Any]] = []
    latency_s: float
    timeline: Timeline
    score: Score | None = None  # when the request named an `example`


class ErrorEvent(BaseModel):
    type: Literal["error"] = "error"
    error: ErrorDetail


EVENT_TYPES = (StartEvent, CallStarted, TextDelta, Retrieved, Reasoned, AnswerEvent, ErrorEvent)
