"""What an experiment's run folder already holds, and the rules that keep it: one process writes it at a time (a
lock), a run never deletes a row it did not write, and answers are resumed only under the settings that made them
(docs/experiments.md#interrupted-runs-lose-nothing)."""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orthrus_rag.eval.experiment.predictions import LogFormatError, PredictionLog
from orthrus_rag.files import FolderBusyError, folder_lock
from orthrus_rag.settings import UserError

SETTINGS_FILE = "settings.json"  # beside predictions.jsonl: the settings its answers were made with
RESULTS_FILE = "results.json"


@dataclass
class Earlier:
    """What earlier runs left in the folder: their rows by question id, and their results.json (None: none)."""

    rows: dict[str, dict[str, Any]]
    results: dict[str, Any] | None


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """The folder for this process alone while the block runs; a UserError naming the other process if it is
    taken."""
    try:
        with folder_lock(folder, ".orthrus-rag.lock"):
            yield
    except FolderBusyError as error:
        raise UserError(f"{error}: wait for that run to end, or give this one its own hydra.run.dir") from None


def earlier_runs(log: PredictionLog, settings: dict[str, Any], resume: bool | str, overwrite: bool) -> Earlier:
    """The rows this run keeps. A folder holding answers is refused unless `resume` (true, or "force" when their
    settings were not saved) or `overwrite`; a resume under other settings is refused, naming each that differs."""
    if resume and overwrite:
        raise UserError("resume and overwrite contradict each other: resume=true keeps the answers in the run "
                        "folder, overwrite=true discards them; give one")
    folder = log.path.parent
    if overwrite:
        return Earlier({}, None)
    try:
        contents = log.read()
    except LogFormatError as error:
        raise UserError(str(error)) from None
    for number, why in contents.skipped:
        print(f"orthrus-rag: warning: line {number} of {log.path} is {why}: skipped, its question is asked again",
              file=sys.stderr)
    if contents.rows and not resume:
        raise UserError(f"{folder} already holds {len(contents.rows)} answers ({log.path.name}): add resume=true to "
                        "finish that run, give this one its own hydra.run.dir, or add overwrite=true to discard them")
    if contents.rows:
        check_resumable(folder / SETTINGS_FILE, settings, forced=resume == "force")
    return Earlier(contents.rows, _json_or_none(folder / RESULTS_FILE))


def check_resumable(path: Path, settings: dict[str, Any], forced: bool = False) -> None:
    """Refuse to resume when the settings saved at `path` differ from this run's, or were not saved (unless
    `forced`: resume=force)."""
    if not path.is_file():
        if forced:
            return
        raise UserError(f"resume=true: {path.parent} holds answers but no {path.name}, so the settings they were made "
                        "with are unknown: resume=force resumes them under this run's settings, or give this run "
                        "its own hydra.run.dir")
    before, now = _flat(json.loads(path.read_text(encoding="utf-8"))), _flat(settings)
    keys = sorted(k for k in before.keys() | now.keys() if k not in before or k not in now or before[k] != now[k])
    if keys:
        differ = "; ".join(f"{k} ({_shown(before, k)} then, {_shown(now, k)} now)" for k in keys)
        raise UserError(f"resume=true: the answers in {path.parent} were made with other settings: {differ}. "
                        "Resume with the same settings, or run these in a new folder (another hydra.run.dir)")


def _json_or_none(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as {"group.key": value}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _shown(settings: dict[str, Any], key: str) -> str:
    return repr(settings[key]) if key in settings else "unset"
