"""What one rag run measured: question latency, per-call latency, goodput, accuracy, where the time went
(definitions: eval/bench/README.md, workload=rag). A question's latency includes its time waiting for a slot.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..experiment.metrics import aggregate, prompt_tokens, score_answers
from ..load.arrivals import Load
from .metrics import BASELINES, Call, latency_stats, percentile, ratio

TOKEN_KINDS = ("decode", "prefill", "embed")
RAW_KEYS = ("latencies_s", "timeline", "predictions")


@dataclass
class RunData:
    mode: str
    load: Load
    answers: list  # list[Answer], in question order
    wall_s: float
    calls: list[Call]
    samples: list[tuple[float, dict]]  # (seconds since start, counters)
    engine: dict  # counters over the run (per process for isolated)


def goodput(latencies: list[float], wall_s: float, slo_s: float) -> dict[str, float]:
    """Questions answered within `slo_s`: as a fraction of all and per second of wall time."""
    good = sum(1 for x in latencies if x <= slo_s)
    return {"slo_s": slo_s, "fraction": good / len(latencies) if latencies else 0.0,
            "qps": good / wall_s if wall_s > 0 else 0.0}


def call_stats(calls: list) -> dict[str, dict]:
    """Per-call latency by kind; for generation also time to first token and time per output token."""
    by_kind = {kind: [c for c in calls if c.kind == kind] for kind in ("embed", "generate")}
    out = {kind: {"n": len(mine), **latency_stats([c.done - c.sent for c in mine])} for kind, mine in by_kind.items()}
    ttft = [c.ttft_s for c in by_kind["generate"] if c.ttft_s is not None]
    tpot = [c.tpot_s for c in by_kind["generate"] if c.tpot_s is not None]
    out["generate"].update(ttft_p50_s=percentile(ttft, 50), ttft_p99_s=percentile(ttft, 99),
                           tpot_p50_s=percentile(tpot, 50), tpot_mean_s=sum(tpot) / len(tpot) if tpot else None,
                           completion_tokens=sum(c.completion_tokens for c in by_kind["generate"]))
    return out


def time_share(engine: dict, wall_s: float) -> dict[str, Any]:
    """Where the wall time went: busy seconds by kind over wall time, and the idle rest.

    Engine modes: `generator` (decode, prefill, backbone embeddings) and `embedder` (co-located embedder) step
    time. Isolated: each process's busy share (both can be busy at once). hf: generate and encode calls."""
    if not engine or wall_s <= 0:
        return {}
    if "generate" in engine and isinstance(engine["generate"], dict):  # isolated
        return {kind: _busy_share(counters, wall_s) for kind, counters in engine.items()}
    if "generate_s" in engine:  # hf
        gen, emb = engine["generate_s"] / wall_s, engine["embed_s"] / wall_s
        return {"generate": gen, "embed": emb, "idle": max(0.0, 1 - gen - emb)}
    return _busy_share(engine, wall_s)


def _busy_share(engine: dict, wall_s: float) -> dict[str, Any]:
    gen, emb = engine.get("generator_s", 0.0) / wall_s, engine.get("embedder_s", 0.0) / wall_s
    steps = engine.get("steps", 0)
    return {"generator": gen, "embedder": emb, "idle": max(0.0, 1 - gen - emb), "steps": steps,
            "mixed_steps": engine.get("mixed_steps", 0), "tokens": engine.get("tokens", {}),
            "tokens_per_step": {k: v / steps for k, v in engine.get("tokens", {}).items()} if steps else {}}


def timeline(samples: list[tuple[float, dict]]) -> list[dict]:
    """Counter deltas between consecutive samples: per interval, steps, tokens by kind and busy seconds, and the
    requests the engine held after its last finished step (`in_flight`: nonzero means a step was under way).
    Empty unless the counters are a single engine's (hetero, alternating)."""
    if len(samples) < 2 or "tokens" not in samples[0][1]:
        return []
    return [{"t": round(t1, 3), "dt": round(t1 - t0, 4), "steps": b["steps"] - a["steps"],
             "busy_s": round(b["generator_s"] + b["embedder_s"] - a["generator_s"] - a["embedder_s"], 4),
             **{k: b["tokens"].get(k, 0) - a["tokens"].get(k, 0) for k in TOKEN_KINDS},
             "in_flight": b.get("running", 0) + sum(b.get("waiting", {}).values())}
            for (t0, a), (t1, b) in zip(samples, samples[1:])]


def reasoning_calls(calls: list[Call]) -> list[dict[str, Any]]:
    """The generate calls as prompt_tokens counts them."""
    return [{"kind": "reason", "prompt_tokens": c.prompt_tokens, "cached_tokens": c.cached_tokens,
             "reused_tokens": c.reused_tokens, "recomputed_tokens": c.recomputed_tokens}
            for c in calls if c.kind == "generate"]


def summarize_run(run: RunData, questions: list, slo_s: float) -> dict[str, Any]:
    latencies = [a.queue_s + a.latency_s for a in run.answers]
    n = len(run.answers)
    return {"mode": run.mode, "load": run.load.label, "rate": run.load.rate, "n": n, "wall_s": run.wall_s,
            "qps": n / run.wall_s if run.wall_s > 0 else 0.0, **latency_stats(latencies),
            "goodput": goodput(latencies, run.wall_s, slo_s), **aggregate(score_answers(questions, run.answers)),
            "calls": call_stats(run.calls), "time_share": time_share(run.engine, run.wall_s),
            "prompt_tokens": prompt_tokens(reasoning_calls(run.calls), n),
            "engine": run.engine, "latencies_s": latencies, "timeline": timeline(run.samples),
            "predictions": [a.prediction for a in run.answers]}


def rag_ratios(modes: dict[str, dict]) -> dict[str, float | None]:
    """p99 reduction of hetero against each baseline (1 - hetero p99 / baseline p99) and qps ratios;
    None where a mode did not run. Also how many of each baseline's predictions equal hetero's."""
    hetero = modes.get("hetero")
    out: dict[str, float | None] = {}
    for base in BASELINES:
        other = modes.get(base)
        both = hetero is not None and other is not None
        p99 = ratio(hetero["p99_s"], other["p99_s"]) if both else None
        out[f"p99_reduction_vs_{base}"] = None if p99 is None else 1 - p99
        out[f"qps_hetero/{base}"] = ratio(hetero["qps"], other["qps"]) if both else None
        out[f"same_predictions_{base}"] = (sum(a == b for a, b in zip(hetero["predictions"], other["predictions"]))
                                           / max(1, len(hetero["predictions"])) if both else None)
    return out


def headline(sweep: list[dict]) -> dict[str, Any]:
    """bench.json's `modes`, `ratios` and `headline` for a sweep of loads. The headline load is the highest
    open-loop rate, else the closed loop: its `modes` without raw lists, and the ratios with p99 from that load and
    qps from the closed loop when one ran (open-loop qps cannot exceed the offered rate)."""
    open_loads = [e for e in sweep if e["rate"] is not None]
    head = max(open_loads, key=lambda e: e["rate"]) if open_loads else sweep[-1]
    closed = next((e for e in sweep if e["rate"] is None), head)
    closed_qps = {k: v for k, v in rag_ratios(closed["modes"]).items() if k.startswith("qps_")}
    return {"modes": {m: {k: v for k, v in r.items() if k not in RAW_KEYS} for m, r in head["modes"].items()},
            "ratios": dict(rag_ratios(head["modes"]), **closed_qps),
            "headline": {"p99": head["load"], "qps": closed["load"]}}
