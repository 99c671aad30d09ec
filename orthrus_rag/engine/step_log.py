"""The last N engine steps, one small record each: what the step held and what was left waiting.

The engine appends one `StepRecord` per step from its loop thread; readers on other threads take the records after
an id (`since`). The buffer is bounded (`runtime.step_log_size`), so it can stay on: a record is a few integers
taken from counts the step already has (docs/web.md gives the measured cost).
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class StepRecord:
    """One step. `tokens` counts the step's work by kind (decode, prefill, embed; embed includes the co-located
    embedder's `embedder_tokens`); `running`, `waiting` and `kv_blocks_used` are as the step left them;
    `copied_tokens` the passage tokens whose KV the step copied in from the passage store and did not compute,
    `recomputed_tokens` those it copied in and computed again (counted in `tokens["prefill"]`)."""

    id: int
    time: float  # wall clock (seconds since the epoch) when the step ended
    step_s: float
    generator_s: float
    embedder_s: float
    tokens: dict[str, int]
    embedder_tokens: int
    running: int
    waiting: dict[str, int]
    kv_blocks_used: int
    kv_blocks_total: int
    copied_tokens: int = 0
    recomputed_tokens: int = 0


class StepLog:
    """A ring buffer of the last `size` StepRecords (size 0: nothing is kept)."""

    def __init__(self, size: int):
        self.size = size
        self._records: deque[StepRecord] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.next_id = 1  # the id of the next record (written by the appending thread only)

    def append(self, record: StepRecord) -> None:
        with self._lock:
            self._records.append(record)
            self.next_id = record.id + 1

    def since(self, after: int = 0, limit: int | None = None) -> list[StepRecord]:
        with self._lock:
            records = list(self._records)
        return newer_than(records, after, limit)


def newer_than(records: Iterable[StepRecord], after: int, limit: int | None = None) -> list[StepRecord]:
    """The records with an id above `after`, oldest first; with `limit`, the newest `limit` of them."""
    kept = [r for r in records if r.id > after]
    return kept[-limit:] if limit else kept
