"""Answering a question set with the stack a plan builds: the answers in question order, the wall time of the
answering alone, and the engine's counters; the shape a local run and a `workers=N` run both return."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from orthrus_rag.engine import EngineLike
from orthrus_rag.stack import StackPlan

OnAnswer = Callable[[int, Any], None]  # (index in the questions answered, its Answer), as each completes


@dataclass
class RunOutput:
    questions: list  # list[eval.datasets.Question]
    answers: list  # list[Answer], in question order
    wall_s: float
    engine_stats: dict[str, Any]


async def answer_with(plan: StackPlan, engine: EngineLike, questions: list, concurrency: int | None,
                      on_answer: OnAnswer | None = None) -> RunOutput:
    """Every question through the pipeline `plan` builds on `engine`, `concurrency` at a time."""
    pipeline = (await plan.build(engine)).pipeline
    start = time.perf_counter()
    answers = await pipeline.run([q.question for q in questions], concurrency=concurrency, on_answer=on_answer)
    return RunOutput(questions, answers, time.perf_counter() - start, engine.stats())
