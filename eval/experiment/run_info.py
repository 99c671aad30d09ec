"""Facts about a run that change or explain its numbers: the machine, library versions, commit and date
(`environment`), and which questions and corpus it read (`data_facts`). Read by the leaderboard's header.

Imports neither torch nor transformers: versions come from the installed package metadata.
"""
from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orthrus_rag.cpu_info import cpu_model

if TYPE_CHECKING:
    from .datasets import DatasetSpec

REPO_ROOT = Path(__file__).resolve().parents[2]


def environment() -> dict[str, Any]:
    """Date (UTC, when the run finished), machine, Python/torch/transformers versions, git commit."""
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
            "python": platform.python_version(), "torch": package_version("torch"),
            "transformers": package_version("transformers"), **git_state()}


def machine() -> dict[str, Any]:
    """CPU model, logical cores (and those this process may use), the GPU when torch already uses one, and the
    load averages (1, 5, 15 min) when the run ended: a high load means other work shared the machine."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "cores_usable": usable, "gpu": gpu_name(), "load_avg": load}


def gpu_name() -> str | None:
    """The CUDA device name when torch is already imported and sees a GPU; never imports torch itself."""
    torch = sys.modules.get("torch")
    with contextlib.suppress(Exception):  # a broken CUDA setup must not fail the results file
        return torch.cuda.get_device_name(0) if torch is not None and torch.cuda.is_available() else None
    return None


def package_version(name: str) -> str | None:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(name)
    return None


def git_state(root: Path = REPO_ROOT) -> dict[str, Any]:
    """`git_commit` (full hash) and `git_dirty` (uncommitted changes to tracked files); None outside a checkout."""
    git = ["git", "-C", str(root)]
    commit = command_output([*git, "rev-parse", "HEAD"])
    status = command_output([*git, "status", "--porcelain", "--untracked-files=no"]) if commit else None
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def command_output(args: list[str], timeout_s: float = 10) -> str | None:
    """A command's stdout, stripped; None when it cannot start, times out or exits non-zero."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=True).stdout.strip()
    return None


# ---- data -------------------------------------------------------------------------------------------------------
def data_facts(spec: DatasetSpec, answered: int) -> dict[str, Any]:
    """Which questions (split, how many answered, the split's and the file's size) and which corpus (file, passage
    count, fingerprint) the run read, from the run's `spec` (paths as the run resolved them); sizes are None when
    unreadable."""
    return {"questions": {"file": _name(spec.path), "split": spec.split, "answered": answered,
                          **question_counts(spec.path, spec.split)},
            "corpus": {"file": _name(spec.corpus), **corpus_facts(spec.corpus)}}


def question_counts(path: str | Path, split: str | None) -> dict[str, int | None]:
    """`split_size` (questions in the split) and `total` (questions in the file); None for Hugging Face ids."""
    from .datasets import HF_PREFIX, read_rows, select_split

    if not str(path).startswith(HF_PREFIX):
        with contextlib.suppress(Exception):  # facts for the report only: an unreadable source leaves them unknown
            rows = read_rows(Path(path))
            return {"split_size": len(select_split(rows, split or "all", None)), "total": len(rows)}
    return {"split_size": None, "total": None}


def corpus_facts(path: str | Path | None) -> dict[str, Any]:
    """`passages` and `fingerprint` (a digest of ids, titles and texts: equal for equal corpora in equal order)."""
    with contextlib.suppress(Exception):  # facts for the report only: an unreadable corpus leaves them unknown
        from orthrus_rag.indexes import corpus_fingerprint, load_corpus

        passages = load_corpus(path)
        return {"passages": len(passages), "fingerprint": corpus_fingerprint(passages)}
    return {"passages": None, "fingerprint": None}


def _name(path: str | Path) -> str:
    """The file name only: no machine-specific folders in results that get committed."""
    text = str(path)
    return text if text.startswith("hf:") else Path(text).name
