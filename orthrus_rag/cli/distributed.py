"""`orthrus-rag workers=N`: one experiment's questions spread over N Ray actors, merged back in question order
(docs/serving.md#scaling-out).

Each actor builds its own engine and the stack the run's plan describes, as a local run does (the index built once
per machine, loaded by the others); once every actor is ready, all answer at once, each `concurrency` questions at a
time. The merged RunOutput has the local run's shape, its wall time that of the answering phase (ready to last
answer).
"""
from __future__ import annotations

import time

from orthrus_rag.cli.answering import OnAnswer, RunOutput, answer_with
from orthrus_rag.cluster import connect, index_lock, summed_stats
from orthrus_rag.models import usable_cores
from orthrus_rag.settings import UserError
from orthrus_rag.stack import StackPlan


class ExperimentWorker:
    """One engine and the stack built on it in a Ray actor (async: the engine's calls run on the actor's loop)."""

    def __init__(self, plan: StackPlan, concurrency: int | None):
        self.plan, self.concurrency = plan, concurrency
        self.engine = self.stack = None

    async def prepare(self) -> None:
        self.engine = self.plan.start_engine()
        with index_lock():
            self.stack = await self.plan.build(self.engine)

    async def answer(self, questions: list) -> RunOutput:
        return await answer_with(self.stack, questions, self.concurrency)

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()


def answer_distributed(plan: StackPlan, questions: list, workers: int, concurrency: int | None,
                       on_answer: OnAnswer | None = None) -> RunOutput:
    ray = connect(None)
    plan = plan.sharing_cores(usable_cores() // workers)
    gpus = int(plan.engine.device != "cpu" and ray.cluster_resources().get("GPU", 0) >= workers)
    actor = ray.remote(num_cpus=1, num_gpus=gpus)(ExperimentWorker)
    actors = [actor.remote(plan, concurrency) for _ in range(workers)]
    try:
        _get(ray, [a.prepare.remote() for a in actors])
        start = time.perf_counter()
        shards, alive = _answer_shards(ray, actors, questions, on_answer)
        wall_s = time.perf_counter() - start
        _get(ray, [a.shutdown.remote() for a in alive])
    finally:
        for a in actors:
            ray.kill(a)
    return merged(questions, [shards[i] for i in range(workers)], wall_s)


def _answer_shards(ray, actors: list, questions: list, on_answer: OnAnswer | None) -> tuple[dict, list]:
    """Shard i (questions[i::N]) on actor i; a shard whose actor died goes to a surviving one. Returns shard index
    -> RunOutput, each shard's answers handed to `on_answer` (by index in `questions`) as it completes, and the
    actors still alive."""
    n, pending, done, alive = len(actors), {}, {}, list(actors)
    for i, a in enumerate(actors):
        pending[a.answer.remote(questions[i::n])] = (i, a)
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        i, a = pending.pop(ref)
        try:
            done[i] = _get(ray, [ref])[0]
        except ray.exceptions.RayActorError:  # the actor died: its shard goes to a survivor
            alive.remove(a)
            if not alive:
                raise
            survivor = alive[i % len(alive)]
            pending[survivor.answer.remote(questions[i::n])] = (i, survivor)
            continue
        for j, answer in enumerate(done[i].answers):
            if on_answer is not None:
                on_answer(i + j * n, answer)
    return done, alive


def _get(ray, refs: list) -> list:
    """The actors' results; a mistake in the config (a UserError in an actor) is reported as in a local run."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, UserError):
            raise error.cause from None
        raise


def merged(questions: list, shards: list[RunOutput], wall_s: float) -> RunOutput:
    """The shards of `questions[i::N]` back in question order, the engines' counters summed."""
    answers = [None] * len(questions)
    for i, shard in enumerate(shards):
        answers[i::len(shards)] = shard.answers
    return RunOutput(questions, answers, wall_s, summed_stats([s.engine_stats for s in shards]))
