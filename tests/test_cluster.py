"""Ray stays out of single-process runs; scale-out without the `ray` extra is a clear error."""
from __future__ import annotations

import re
import socket
import subprocess
import sys
import time

import pytest

from orthrus_rag.cluster import import_ray, summed_stats
from orthrus_rag.settings import UserError

SINGLE_PROCESS = ["orthrus_rag.serving.app", "orthrus_rag.serving.cli", "orthrus_rag.serving.lifecycle",
                  "orthrus_rag.cli.run", "orthrus_rag.eval.leaderboard", "orthrus_rag.cluster"]


def test_single_process_modules_do_not_import_ray():
    code = (f"import sys\nfor m in {SINGLE_PROCESS!r}: __import__(m)\n"
            "loaded = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\nprint(loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_scale_out_without_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the `ray` extra were not installed
    with pytest.raises(UserError, match=r"needs Ray: pip install -e '\.\[ray\]'"):
        import_ray()


@pytest.mark.parametrize("form", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_an_address_nobody_listens_on_fails_in_seconds(form):
    pytest.importorskip("ray")
    with socket.socket() as free:  # a port that was free a moment ago, so nothing listens there
        free.bind(("127.0.0.1", 0))
        address = form.format(port=free.getsockname()[1])
    code = (f"from orthrus_rag.cluster import connect\ntry:\n    connect({address!r})\n"
            "except Exception as error:\n    print(type(error).__name__, error)\n")
    start = time.monotonic()  # in its own process: this one may already be connected to a test cluster
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100).stdout
    assert time.monotonic() - start < 30  # Ray's own retries took minutes
    assert re.match(rf"UserError cannot reach the Ray cluster at '{re.escape(address)}'.*ray start --head", out)


def test_engine_counters_add_up_key_by_key():
    a = {"steps": 2, "tokens": {"decode": 3, "embed": 1}, "running": 1, "policy": "adaptive", "generator_s": 0.5}
    b = {"steps": 5, "tokens": {"decode": 4, "embed": 0}, "running": 0, "policy": "adaptive", "generator_s": 0.25}
    assert summed_stats([a, b]) == {"steps": 7, "tokens": {"decode": 7, "embed": 1}, "running": 1,
                                    "policy": "adaptive", "generator_s": 0.75}
    assert summed_stats([]) == {}
