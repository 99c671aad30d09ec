"""Throughput and latency of one benchmark run, and the ratios between modes."""
from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("embed", "generate")
BASELINES = ("isolated", "alternating", "hf", "vllm", "vllm_shared")
MODES = ("hetero", *BASELINES)  # the serving modes compared (eval/bench/README.md)
DEFAULT_MODES = MODES[:4]  # those that need no peer installed (vllm*: ./install.sh --peers vllm)


@dataclass
class Call:
    """One finished request as the client saw it (perf_counter seconds); for a generation in the rag workload, where
    measured, its time to first token (from the call) and per output token after the first."""

    kind: str  # embed | generate
    sent: float
    done: float
    ttft_s: float | None = None
    tpot_s: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, those the prefix cache served (0 where the backend does not say)
    reused_tokens: int = 0  # of prompt_tokens, those copied from the passage store (runtime.passage_reuse)
    recomputed_tokens: int = 0  # of prompt_tokens, those copied from the passage store and computed again (blend)


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


def summarize(mode: str, records: list[Call], wall_s: float, engine: dict | None = None) -> dict:
    """A mode's bench.json entry: requests per second, and client-side latency by kind (eval/bench/README.md)."""
    by_kind = {k: [r.done - r.sent for r in records if r.kind == k] for k in KINDS}
    stats = {k: latency_stats(v) for k, v in by_kind.items()}
    return {"mode": mode, "requests": len(records), "wall_s": wall_s, "rps": len(records) / wall_s,
            "embed_rps": len(by_kind["embed"]) / wall_s, "gen_rps": len(by_kind["generate"]) / wall_s,
            **{key: {k: s[key] for k, s in stats.items()} for key in ("p50_s", "p99_s", "mean_s")},
            "engine": engine or {}}


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, the one way modes are compared; None where a mode did not run (a value is missing) or b is 0."""
    return a / b if a is not None and b else None


def ratios(modes: dict[str, dict]) -> dict[str, float | None]:
    """hetero's requests/s over each baseline's, from bench.json's `modes` (the GPU check rounds them); None where
    either mode did not run (a run of one request or more never has rate 0)."""
    hetero = modes.get("hetero", {})
    return {f"hetero/{b}": ratio(hetero.get("rps"), modes.get(b, {}).get("rps")) for b in BASELINES}


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

