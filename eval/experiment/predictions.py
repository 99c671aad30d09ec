"""`predictions.jsonl` as a log: each answer is appended and flushed as it completes (synced to disk every
FSYNC_EVERY rows and at the end); at the end the file is rewritten atomically (docs/experiments.md: Interrupted runs
lose nothing).
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orthrus_rag.files import write_atomic

NAME = "predictions.jsonl"
FSYNC_EVERY = 16  # rows appended between two syncs to disk: a power cut loses at most this many answers


class LogFormatError(ValueError):
    """A line before the last is not a prediction row: the file was edited or damaged by something else."""


@dataclass
class LogContents:
    """What the log holds: one row per question id (the last written for it), in the order first written, and the
    lines skipped (a last line cut short by a kill or a full disk), as (line number, why)."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[tuple[int, str]] = field(default_factory=list)


class PredictionLog:
    def __init__(self, folder: Path):
        self.path = Path(folder) / NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = None
        self._unsynced = 0

    def read(self) -> LogContents:
        """The rows already in the log. A last line that is not a whole row (invalid UTF-8 or JSON: a write cut
        short) is skipped and reported; any other line that is not a row is a LogFormatError naming it."""
        contents = LogContents()
        data = self.path.read_bytes() if self.path.exists() else b""
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line.decode("utf-8"))
                if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                    raise ValueError("not a JSON object with a string 'id'")
            except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                if number < len(lines):
                    raise LogFormatError(f"line {number} of {self.path} is not a prediction row ({error}); fix or "
                                         "remove that line, then run again") from None
                contents.skipped.append((number, f"cut short ({type(error).__name__})"))
                continue
            contents.rows[row["id"]] = row  # a later row for a question replaces an earlier one, in its place
        return contents

    def start(self, keep: list[dict[str, Any]]) -> None:
        """Begin the log with the rows kept from earlier runs (none: a fresh log)."""
        self.finish(keep)
        self._file = self.path.open("a", encoding="utf-8")

    def append(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._file.flush()
        self._unsynced += 1
        if self._unsynced >= FSYNC_EVERY:
            self._sync()

    def _sync(self) -> None:
        os.fsync(self._file.fileno())
        self._unsynced = 0

    def close(self) -> None:
        """Stop appending, syncing what was appended; after a write error (a full disk), close whatever happens."""
        if self._file is None:
            return
        try:
            self._file.flush()
            self._sync()
        finally:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def finish(self, rows: list[dict[str, Any]]) -> None:
        """Close the log and rewrite it as exactly `rows`, atomically."""
        self.close()
        write_atomic(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
