"""Watching the engine requests a block of code makes: a callback, set with `observing`, that sees every output of
every request submitted inside the block (on the caller's side, in the caller's task): the text deltas as they come,
then the final one with the result and its timings. Outside such a block nothing is called.

A request made in a task started inside the block is watched too (tasks copy the context they start in).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from orthrus_rag.engine.output import StepOutput

Observer = Callable[[StepOutput], None]
OBSERVER: ContextVar[Observer | None] = ContextVar("orthrus_engine_observer", default=None)  # set by `observing`


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[None]:
    token = OBSERVER.set(observer)
    try:
        yield
    finally:
        OBSERVER.reset(token)
