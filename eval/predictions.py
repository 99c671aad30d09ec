"""`predictions.jsonl` as a log: each answer is appended and flushed as it completes; at the end the file is
rewritten atomically in question order (docs/experiments.md: Interrupted runs lose nothing).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from orthrus_rag.files import write_atomic

NAME = "predictions.jsonl"


class PredictionLog:
    def __init__(self, folder: Path):
        self.path = Path(folder) / NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = None

    def answered(self) -> dict[str, dict[str, Any]]:
        """Rows already in the log by question id, those that failed left out (they are asked again); a line cut
        short by a kill is skipped."""
        rows = {}
        for line in self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []:
            with contextlib.suppress(json.JSONDecodeError):
                row = json.loads(line)
                if isinstance(row, dict) and "id" in row and row.get("error") is None:
                    rows[row["id"]] = row
        return rows

    def start(self, keep: list[dict[str, Any]]) -> None:
        """Begin the log with the rows kept from an earlier run (none: a fresh log)."""
        self.finish(keep)
        self._file = self.path.open("a", encoding="utf-8")

    def append(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._file.flush()

    def finish(self, rows: list[dict[str, Any]]) -> None:
        """Close the log and rewrite it as exactly `rows`, atomically."""
        if self._file is not None:
            self._file.close()
            self._file = None
        write_atomic(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
