"""Ray, for scale-out only: joining a cluster, one lock for index builds shared by every process on a machine, and
the engines' counters added up.

Single-process serving and experiments never import this module's Ray parts: `connect` imports ray when called.
"""
from __future__ import annotations

import socket
from typing import Any

from filelock import FileLock

from orthrus_rag.files import cache_dir
from orthrus_rag.settings import UserError


def import_ray() -> Any:
    """The `ray` module; a clear error when the `ray` extra is not installed."""
    try:
        import ray
    except ImportError as error:
        raise UserError("scale-out (server.replicas>1, workers>1) needs Ray: pip install -e '.[ray]' "
                        "(or ./install.sh)") from error
    return ray


def connect(address: str | None) -> Any:
    """Join the Ray cluster at `address` (`auto`, `ray://host:10001`, `host:6379`), or start a local one when None
    (then `$RAY_ADDRESS`, when set, is used as Ray does). Already connected: kept as is."""
    ray = import_ray()
    if not ray.is_initialized():
        host, _, port = (address or "").removeprefix("ray://").rpartition(":")
        try:
            if host and port.isdigit():  # an address that takes no connection fails here (Ray retries for minutes)
                socket.create_connection((host, int(port)), timeout=10).close()
            ray.init(address=address, include_dashboard=False)
        except OSError as error:  # ConnectionError, a timeout, an unknown host
            raise UserError(f"cannot reach the Ray cluster at {address!r} ({error}); check server.ray_address "
                            "(or ray_address) and that `ray start --head` runs there") from error
    return ray


def index_lock() -> FileLock:
    """Held while a process loads or builds a cached index, so replicas and workers on one machine build it once
    (the first one builds and saves, the others load the saved copy)."""
    folder = cache_dir() / "indexes"
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / ".build.lock"))


def summed_stats(rows: list[dict]) -> dict:
    """The counters of several engines added key by key (nested dicts too); other values (policy and backend
    names) from the first engine."""
    total: dict = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, dict):
                total[key] = summed_stats([total.get(key, {}), value])
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
            else:
                total.setdefault(key, value)
    return total
