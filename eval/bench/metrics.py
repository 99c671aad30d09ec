"""Throughput and latency of one benchmark run, and the ratios between modes."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

KINDS = ("embed", "generate")
BASELINES = ("isolated", "alternating", "hf")


@dataclass
class Record:
    """One finished request as the client saw it (perf_counter seconds)."""

    kind: str
    sent: float
    done: float


@dataclass
class ModeResult:
    mode: str
    requests: int
    wall_s: float
    rps: float
    embed_rps: float
    gen_rps: float
    p50_s: dict[str, float | None]
    p99_s: dict[str, float | None]
    mean_s: dict[str, float | None]
    engine: dict = field(default_factory=dict)  # engine counters over the timed run (per process for isolated)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_stats(values: list[float]) -> dict[str, float | None]:
    return {"p50_s": percentile(values, 50), "p90_s": percentile(values, 90), "p99_s": percentile(values, 99),
            "mean_s": sum(values) / len(values) if values else None}


def summarize(mode: str, records: list[Record], wall_s: float, engine: dict | None = None) -> ModeResult:
    by_kind = {k: [r.done - r.sent for r in records if r.kind == k] for k in KINDS}
    return ModeResult(
        mode=mode, requests=len(records), wall_s=wall_s,
        rps=len(records) / wall_s, embed_rps=len(by_kind["embed"]) / wall_s,
        gen_rps=len(by_kind["generate"]) / wall_s,
        p50_s={k: percentile(v, 50) for k, v in by_kind.items()},
        p99_s={k: percentile(v, 99) for k, v in by_kind.items()},
        mean_s={k: (sum(v) / len(v) if v else None) for k, v in by_kind.items()}, engine=engine or {})


def ratios(modes: dict[str, ModeResult]) -> dict[str, float | None]:
    hetero = modes.get("hetero")
    return {f"hetero/{b}": (hetero.rps / modes[b].rps if hetero and b in modes and modes[b].rps else None)
            for b in BASELINES}


COUNTERS = ("steps", "mixed_steps", "tokens", "generator_s", "embedder_s", "preemptions", "prefix_cache_hit_tokens",
            "generate_batches", "embed_batches", "generate_s", "embed_s")  # the last four: the hf backend's


def counter_delta(after: dict, before: dict) -> dict:
    """Engine counters accumulated between two `stats()` snapshots; gauges (queue, cache use) kept as after."""
    out = dict(after)
    for key in after.keys() & before.keys() & set(COUNTERS):
        if isinstance(after[key], dict):
            out[key] = {k: v - before[key].get(k, 0) for k, v in after[key].items()}
        else:
            out[key] = round(after[key] - before[key], 4)
    return out

