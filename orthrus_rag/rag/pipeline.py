"""The Pipeline base class: answer one question, or drive many concurrently, with a trace of every call."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import ClassVar

from tqdm.auto import tqdm

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import live
from orthrus_rag.rag.reasoner import Prompt, Reasoner, as_messages
from orthrus_rag.rag.retriever import Retriever
from orthrus_rag.rag.types import Answer, Passage, TraceEvent

_SUMMARY_CHARS = 300


_RECORDING: ContextVar[list[TraceEvent] | None] = ContextVar("orthrus_rag_trace", default=None)


@dataclass(eq=False)
class Pipeline(ABC):
    """A way of answering a question with a retriever and a reasoner.

    A subclass is a `@dataclass(kw_only=True)` whose fields are its settings, with the defaults the project
    reports (conf/pipeline/<name>.yaml starts from them: orthrus_rag/launch.py), and writes
    `async answer(question) -> Answer`, calling `self.retrieve` and `self.reason`: every such call is
    recorded in the answer's trace and the answer's latency is measured, without extra code.
    """

    retriever: Retriever | None
    reasoner: Reasoner | None
    retrieves: ClassVar[bool] = True  # False: answers without retrieving (a stack then loads no index for it)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "answer" in cls.__dict__:
            cls.answer = _traced(cls.__dict__["answer"])  # type: ignore[method-assign]

    @abstractmethod
    async def answer(self, question: str) -> Answer:
        """Answer one question."""

    async def retrieve(self, query: str, k: int) -> list[Passage]:
        """The retriever's k best passages for `query`, recorded in the trace."""
        if self.retriever is None:
            raise RuntimeError(f"{type(self).__name__} was built without a retriever but called retrieve()")
        with live.watch("retrieve", query) as call:  # the call's start, for the trace and the live view alike
            found = await self.retriever.retrieve_with_usage(query, k)
            call.retrieved(found.passages, found.query_tokens)
        titles = " | ".join(p.title or p.id for p in found.passages)
        _record(TraceEvent("retrieve", query, titles, call.start, time.perf_counter(), found.query_tokens))
        return found.passages

    async def reason(self, prompt: Prompt, params: SamplingParams, passages: Sequence[str] = ()) -> str:
        """The reasoner's text for `prompt`, recorded in the trace. `passages`: texts in the prompt that are
        retrieved passages, in order (with runtime.passage_reuse blend or full_reuse the engine reuses their KV)."""
        if self.reasoner is None:
            raise RuntimeError(f"{type(self).__name__} was built without a reasoner but called reason()")
        text = as_messages(prompt)[-1]["content"]
        summary = text if len(text) <= _SUMMARY_CHARS else "..." + text[-_SUMMARY_CHARS:]
        with live.watch("reason", summary) as call:
            spans = passages and getattr(self.reasoner, "passage_spans", False)  # a reasoner that takes them
            out = await (self.reasoner.reason_with_usage(prompt, params, passages) if spans
                         else self.reasoner.reason_with_usage(prompt, params))
            call.reasoned(out)
        _record(TraceEvent("reason", summary, out.text, call.start, time.perf_counter(), out.prompt_tokens,
                           out.completion_tokens, out.cached_tokens, out.reused_tokens, out.recomputed_tokens))
        return out.text

    def settings(self) -> dict[str, object]:
        """The pipeline's own settings (its public plain-valued attributes), e.g. for a results file."""
        plain = (int, float, str, bool, list, tuple, type(None))
        skip = ("retriever", "reasoner")
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k not in skip and isinstance(v, plain)}

    async def run(self, questions: Iterable[str], concurrency: int | None = 8,
                  arrivals: Sequence[float] | None = None, progress: bool = True,
                  on_answer: Callable[[int, Answer], None] | None = None) -> list[Answer]:
        """Answer many questions concurrently; answers come back in input order. A question whose answering
        raises gets an answer with an empty prediction and the `error`; the other questions go on. `on_answer`
        is called with each question's index and answer as soon as it completes (e.g. to log it).

        At most `concurrency` questions are in flight at once (None: no limit). With `arrivals`
        (offsets in seconds from the start of the run, one per question), question i starts no earlier
        than `arrivals[i]`; the time it then waits for a free slot is its answer's `queue_s`.
        """
        questions = list(questions)
        if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
            raise ValueError(f"concurrency must be an integer >= 1 or None (no limit), got {concurrency!r}")
        if arrivals is not None and len(arrivals) != len(questions):
            raise ValueError(f"arrivals has {len(arrivals)} offsets for {len(questions)} questions; give one each")
        if arrivals is not None and any(a < 0 for a in arrivals):
            raise ValueError("arrival offsets are seconds from the start of the run and must be >= 0")
        if any(not isinstance(q, str) for q in questions):
            raise TypeError("questions must be strings")
        slots = asyncio.Semaphore(concurrency) if concurrency else None
        start = time.perf_counter()

        async def one(i: int) -> Answer:
            if arrivals is not None:
                await asyncio.sleep(max(0.0, start + arrivals[i] - time.perf_counter()))
            arrived = time.perf_counter()
            async with slots or contextlib.nullcontext():
                queued = time.perf_counter() - arrived
                result = await self._answer_or_error(questions[i])
            result.queue_s = queued
            if on_answer is not None:
                on_answer(i, result)
            bar.update(1)
            return result

        with tqdm(total=len(questions), desc=type(self).__name__, disable=not progress) as bar:
            return await gather_or_cancel([one(i) for i in range(len(questions))])

    async def _answer_or_error(self, question: str) -> Answer:
        """The answer, or an empty one recording the error: one question's failure does not end a run."""
        start = time.perf_counter()
        try:
            return await self.answer(question)
        except Exception as error:  # noqa: BLE001 - any failure of this question is its answer's error
            failed = f"{type(error).__name__}: {error}"
            return Answer(question, "", latency_s=time.perf_counter() - start, error=failed)


def _traced(answer):  # noqa: ANN001, ANN202 - wraps any subclass's answer()
    @functools.wraps(answer)
    async def traced(self: Pipeline, question: str) -> Answer:
        if _RECORDING.get() is not None:  # a nested call (e.g. super().answer): the outer one records
            return await answer(self, question)
        start, events = time.perf_counter(), []
        token = _RECORDING.set(events)
        try:
            result = await answer(self, question)
        finally:
            _RECORDING.reset(token)
        if not isinstance(result, Answer):
            raise TypeError(f"{type(self).__name__}.answer must return an Answer, got {type(result).__name__}")
        result.latency_s = time.perf_counter() - start
        for event in events:  # times since the question started
            event.start_s -= start
            event.end_s -= start
        result.trace = events
        return result
    return traced


def _record(event: TraceEvent) -> None:
    events = _RECORDING.get()
    if events is not None:
        events.append(event)


async def gather_or_cancel(coros: list) -> list:
    """All results in order; when one fails (or the caller is cancelled) the others are cancelled, which aborts
    their engine requests."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
