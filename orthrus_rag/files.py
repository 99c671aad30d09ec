"""Where Orthrus-RAG keeps its files (the cache folder: converted models, indexes), and files and folders written so
that a crash, Ctrl-C or an OOM kill never leaves a half-written one behind."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock
from platformdirs import user_cache_dir


def cache_dir() -> Path:
    """$ORTHRUS_RAG_CACHE, else the user's cache directory."""
    return Path(os.environ.get("ORTHRUS_RAG_CACHE") or user_cache_dir("orthrus-rag"))


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to a temporary file beside `path`, then rename it over `path` (one step for readers)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def build_folder_once(target: Path, build: Callable[[Path], object], done: str) -> Path:
    """`target`, made by `build(folder)` in a temporary folder beside it and moved into place whole, once: it is done
    when it holds the file `done`, a reader never sees half of it, and processes that race build it once (a lock)."""
    if (target / done).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not (target / done).exists():
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=target.name + ".tmp-"))
            try:
                build(tmp)
                shutil.rmtree(target, ignore_errors=True)
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target
