"""The streamed form of `/v1/rag`: the pipeline answers in its own task while its live trace is sent as events
(orthrus_rag/serving/rag_events.py). When the client goes away the stream is closed, which cancels the task and so
aborts its engine requests; past the request's deadline the stream ends with a `request_timeout` error event."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict

from eval.datasets import Question
from orthrus_rag.rag import Answer
from orthrus_rag.rag.live import listening
from orthrus_rag.serving.errors import APIError, as_api_error
from orthrus_rag.serving.examples import score
from orthrus_rag.serving.rag_events import AnswerEvent, ErrorEvent, StartEvent, Timeline
from orthrus_rag.serving.responses import RagResponse

STREAM_GRACE_S = 2.0  # past the deadline the stream sends its error event; the server cuts it only this long after


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
