"""Where Orthrus-RAG keeps its files (the cache folder: converted models, indexes), and files written so that a
crash, Ctrl-C or an OOM kill never leaves a half-written one behind."""
from __future__ import annotations

import os
from pathlib import Path

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
