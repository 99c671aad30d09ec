"""Plain data types shared by retrieval, pipelines and evaluation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class Passage:
    """One retrievable passage of a corpus; `score` is filled by a search."""

    id: str
    title: str
    text: str
    score: float = 0.0

    def formatted(self) -> str:
        """The passage as shown to a generator and as embedded for the index."""
        return f"Title: {self.title}\n{self.text}" if self.title else self.text


TraceKind = Literal["retrieve", "reason"]


@dataclass
class TraceEvent:
    """One retrieval or reasoning call made while answering a question.

    `start_s` and `end_s` are seconds since the question started; `output` is a short summary
    (the generated text, or the titles of the passages found).
    """

    kind: TraceKind
    input: str
    output: str
    start_s: float
    end_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, those the prefix cache served
    reused_tokens: int = 0  # of prompt_tokens, those copied from the passage store (runtime.passage_reuse)
    recomputed_tokens: int = 0  # of prompt_tokens, those copied from the passage store and computed again (blend)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class Answer:
    """A pipeline's answer to one question, with the passages it used and how it got there.

    `latency_s` is the time spent answering; `queue_s` the time the question waited for a free
    slot after its arrival (only `Pipeline.run` sets it). `error` names what went wrong when answering
    failed (`Pipeline.run` records it and goes on; the prediction is then empty).
    """

    question: str
    prediction: str
    passages: list[Passage] = field(default_factory=list)
    trace: list[TraceEvent] = field(default_factory=list)
    latency_s: float = 0.0
    queue_s: float = 0.0
    error: str | None = None

    @property
    def num_calls(self) -> dict[str, int]:
        """How many retrieve and reason calls were made."""
        return {kind: sum(event.kind == kind for event in self.trace) for kind in ("retrieve", "reason")}
