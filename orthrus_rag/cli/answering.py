"""Answering a question set with a built stack: the answers in question order, the wall time of the answering
alone, and the engine's counters; the shape a local run and a `workers=N` run both return."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from orthrus_rag.stack import Stack

OnAnswer = Callable[[int, Any], None]  # (index in the questions answered, its Answer), as each completes


@dataclass
class RunOutput:
    questions: list  # list[eval.datasets.Question]
    answers: list  # list[Answer], in question order
    wall_s: float
    engine_stats: dict[str, Any]


async def answer_with(stack: Stack, questions: list, concurrency: int | None,
                      on_answer: OnAnswer | None = None) -> RunOutput:
    """Every question through the stack's pipeline, `concurrency` at a time."""
    start = time.perf_counter()
    answers = await stack.pipeline.run([q.question for q in questions], concurrency=concurrency, on_answer=on_answer)
    return RunOutput(questions, answers, time.perf_counter() - start, stack.engine.stats())
