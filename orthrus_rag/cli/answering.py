"""Answering a question set with the stack a plan builds: with one engine here, or (`orthrus-rag workers=N`) spread
over N Ray actors and merged back in question order, each actor building the plan's stack as a local run does
(docs/serving.md#scaling-out). Either way a RunOutput: the answers in question order, the wall time of the answering
alone (over actors: from every actor ready to the last answer), and the engine's counters."""
from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable

from orthrus_rag.cluster import connect, index_lock, summed_stats
from orthrus_rag.engine import EngineLike
from orthrus_rag.models import usable_cores
from orthrus_rag.rag import Answer
from orthrus_rag.settings import UserError
from orthrus_rag.stack import StackPlan

OnAnswer = Callable[[int, Any], None]  # (index in the questions answered, its Answer), as each completes


@dataclass
class RunOutput:
    questions: list  # list[orthrus_rag.eval.experiment.datasets.Question]
    answers: list  # list[Answer], in question order
    wall_s: float
    engine_stats: dict[str, Any]


def execute(plan: StackPlan, questions: list, workers: int, concurrency: int | None,
            on_answer: OnAnswer | None = None) -> RunOutput:
    """Answer `questions` with one engine and the stack `plan` builds on it (or, with `workers` > 1, with one on
    each of that many Ray actors), `concurrency` at a time (on each)."""
    if workers > 1:
        return answer_distributed(plan, questions, workers, concurrency, on_answer)
    engine = plan.start_engine()
    try:
        return asyncio.run(answer_with(plan, engine, questions, concurrency, on_answer))
    finally:
        engine.shutdown()


async def answer_with(plan: StackPlan, engine: EngineLike, questions: list, concurrency: int | None,
                      on_answer: OnAnswer | None = None) -> RunOutput:
    """Every question through the pipeline `plan` builds on `engine`, `concurrency` at a time."""
    pipeline = (await plan.build(engine)).pipeline
    start = time.perf_counter()
    answers = await pipeline.run([q.question for q in questions], concurrency=concurrency, on_answer=on_answer)
    return RunOutput(questions, answers, time.perf_counter() - start, engine.stats())


class ExperimentWorker:
    """One engine and the stack built on it in a Ray actor (async: the engine's calls run on the actor's loop),
    answering one question a call, at most `concurrency` at once (None: no limit)."""

    def __init__(self, plan: StackPlan, concurrency: int | None):
        self.plan = plan
        self.slots = asyncio.Semaphore(concurrency) if concurrency else None
        self.engine = self.stack = None

    async def prepare(self) -> None:
        self.engine = self.plan.start_engine()
        with index_lock():
            self.stack = await self.plan.build(self.engine)

    async def answer(self, question: str) -> Answer:
        """The answer (or its error), with `queue_s` the time the question waited here for a slot."""
        arrived = time.perf_counter()
        async with self.slots or contextlib.nullcontext():
            queued = time.perf_counter() - arrived
            (answer,) = await self.stack.pipeline.run([question], concurrency=None, progress=False)
        answer.queue_s = queued
        return answer

    def stats(self) -> dict:
        return self.engine.stats()

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()


def answer_distributed(plan: StackPlan, questions: list, workers: int, concurrency: int | None,
                       on_answer: OnAnswer | None = None) -> RunOutput:
    ray = connect(None)
    plan = plan.sharing_cores(usable_cores() // workers)
    gpus = int(plan.engine.device != "cpu" and ray.cluster_resources().get("GPU", 0) >= workers)
    # every question sent to an actor is taken in at once and waits for a slot there (counted in its queue_s)
    actor = ray.remote(num_cpus=1, num_gpus=gpus, max_concurrency=len(questions) + 1)(ExperimentWorker)
    actors = [actor.remote(plan, concurrency) for _ in range(workers)]
    try:
        _get(ray, [a.prepare.remote() for a in actors])
        start = time.perf_counter()
        answers, alive = _answer_each(ray, actors, [q.question for q in questions], on_answer)
        wall_s = time.perf_counter() - start
        stats = summed_stats(_get(ray, [a.stats.remote() for a in alive]))
        _get(ray, [a.shutdown.remote() for a in alive])
    finally:
        for a in actors:
            ray.kill(a)
    return RunOutput(questions, answers, wall_s, stats)


def _answer_each(ray, actors: list, questions: list[str], on_answer: OnAnswer | None) -> tuple[list, list]:
    """Question i on actor i mod N, one call each; each answer handed to `on_answer` (with its index in
    `questions`) as it completes, and the questions of an actor that died sent to a survivor. Returns the answers
    in question order and the actors still alive."""
    answers, alive, pending = [None] * len(questions), list(actors), {}

    def send(i: int, actor) -> None:
        pending[actor.answer.remote(questions[i])] = (i, actor)

    for i in range(len(questions)):
        send(i, actors[i % len(actors)])
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        i, actor = pending.pop(ref)
        try:
            answers[i] = _get(ray, [ref])[0]
        except ray.exceptions.RayActorError:  # the actor died: its questions go to the survivors
            if actor in alive:
                alive.remove(actor)
            if not alive:
                raise
            send(i, alive[i % len(alive)])
            continue
        if on_answer is not None:
            on_answer(i, answers[i])
    return answers, alive


def _get(ray, refs: list) -> list:
    """The actors' results; a mistake in the config (a UserError in an actor) is reported as in a local run."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, UserError):
            raise error.cause from None
        raise
