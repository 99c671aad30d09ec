"""The streamed form of `/v1/rag` (`"stream": true`): the pipeline answers in its own task while its live trace is
sent as events: `start` first, the live events of orthrus_rag/rag/live.py, then `answer` or `error`, then
`data: [DONE]`; their order and fields are tabled in docs/web.md#streamed-v1rag and published in /openapi.json. When
the client goes away the stream is closed, which cancels the task and so aborts its engine requests; past the
request's deadline the stream ends with a `request_timeout` error event."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel

from orthrus_rag.eval.experiment.datasets import Question
from orthrus_rag.rag import Answer
from orthrus_rag.rag.live import CallStarted, LiveEvent, Reasoned, Retrieved, TextDelta, listening
from orthrus_rag.serving.errors import APIError, ErrorDetail, as_api_error
from orthrus_rag.serving.examples import Score, score
from orthrus_rag.serving.responses import RagResponse

STREAM_GRACE_S = 2.0  # past the deadline the stream sends its error event; the server cuts it only this long after
SPANS = ("queue_s", "embed_s", "search_s", "prefill_s", "decode_s")  # the parts of a call's time the events report


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
        for name in SPANS:  # a retrieval reports queue, embed and search; a reasoning call queue, prefill and decode
            setattr(self, name, getattr(self, name) + getattr(event, name, 0.0))

    def close(self, total_s: float) -> Timeline:
        spent = sum(getattr(self, name) for name in SPANS)
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


async def rag_events(answer: Callable[[], Awaitable[Answer]], question: str, pipeline: str,
                     example: Question | None, remaining_s: float | None) -> AsyncIterator[dict]:
    """The events of one question answered by `answer()`, each a JSON-ready dict."""
    events: asyncio.Queue = asyncio.Queue()
    started = time.perf_counter()

    async def run() -> Answer:
        with listening(events.put_nowait):
            return await answer()

    task = asyncio.ensure_future(run())
    task.add_done_callback(lambda _: events.put_nowait(None))
    end = None if remaining_s is None else asyncio.get_running_loop().time() + remaining_s
    timeline = Timeline()
    try:
        yield StartEvent(question=question, pipeline=pipeline).model_dump()
        while (event := await _next(events, end)) is not None:
            timeline.add(event)
            yield asdict(event)
        result = task.result()
        scored = score(example, result.prediction, result.passages) if example is not None else None
        yield AnswerEvent(**RagResponse.of(result).model_dump(), latency_s=result.latency_s,
                          timeline=timeline.close(time.perf_counter() - started), score=scored).model_dump()
    except _PastDeadline:
        yield _error(APIError(504, f"the question ran past its deadline ({remaining_s:.3g} s: server.request_timeout_s "
                                   "or the request's timeout) and was stopped", "timeout_error",
                              code="request_timeout"))
    except Exception as err:  # the pipeline failed: the stream has started, so the error is an event
        yield _error(as_api_error(err))
    finally:
        if not task.done():  # the client went away or time ran out: stop the pipeline and its engine requests
            task.cancel()
            await asyncio.wait([task])


class _PastDeadline(Exception):
    """The question's deadline passed before its pipeline ended."""


async def _next(events: asyncio.Queue, end: float | None):
    """The next event, waiting no later than `end` (event-loop time; None: no limit); _PastDeadline past it."""
    timeout = None if end is None else max(0.0, end - asyncio.get_running_loop().time())
    try:
        return await asyncio.wait_for(events.get(), timeout)
    except TimeoutError:
        raise _PastDeadline from None


def _error(err: APIError) -> dict:
    return ErrorEvent(**err.body()).model_dump()
