"""Where Orthrus-RAG keeps its files (the cache folder: converted models, indexes), files and folders written so
that a crash, Ctrl-C or an OOM kill never leaves a half-written one behind, and a folder one process writes at a
time."""
from __future__ import annotations

import contextlib
import fcntl
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
    """Write `text` to a temporary file of its own beside `path`, synced, then rename it over `path` (one step for
    readers). On any failure (a full disk) `path` is left as it was and the temporary file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, path.stat().st_mode & 0o777 if path.exists() else 0o644)  # mkstemp's own mode is 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


class FolderBusyError(RuntimeError):
    """Another live process holds the folder's lock."""


@contextlib.contextmanager
def folder_lock(folder: Path, name: str = ".lock"):
    """Hold an advisory lock on `folder` (the file `name` in it, holding this process's pid) until the block ends;
    FolderBusyError naming the holder's pid when another process holds it. The kernel drops the lock when its
    holder exits, however it exits, so a killed run never leaves its folder locked."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise FolderBusyError(f"another process (pid {holder}) is writing to {folder}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


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
