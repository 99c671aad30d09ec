"""The events of a streamed `/v1/rag` answer (`"stream": true`): `start` first, the live events of
orthrus_rag/rag/live.py, then `answer` or `error`, then `data: [DONE]`; their order and fields are tabled in
docs/web.md#streamed-v1rag and published in /openapi.json."""
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
