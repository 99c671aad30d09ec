"""Reports for the rag benchmark: bench.json, a Markdown table, and PNG plots.

    python -m orthrus_rag.eval.bench.report outputs/bench/rag/*/bench.json --out reports/rag   # merge: a run per rate or mode

Which plot shows what, and when each is written: eval/bench/README.md (workload=rag).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..experiment.markdown import cell, markdown_table  # noqa: E402
from .metrics import MODES  # noqa: E402
from .rag_metrics import TOKEN_KINDS, headline, rag_ratios  # noqa: E402

COLORS = {"hetero": "tab:blue", "isolated": "tab:orange", "alternating": "tab:green", "hf": "tab:red",
          "decode": "tab:blue", "prefill": "tab:purple", "embed": "tab:orange"}


# ---- table ------------------------------------------------------------------------------------------------------
def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def mode_row(r: dict) -> list[str]:
    gen, emb = r["calls"]["generate"], r["calls"]["embed"]
    return [r["mode"], str(r["n"]), cell(r["qps"], 3), cell(r["p50_s"]), cell(r["p90_s"]), cell(r["p99_s"]),
            cell(r["mean_s"]), _pct(r["goodput"]["fraction"]), cell(emb["p50_s"], 3), cell(gen["ttft_p50_s"], 3),
            cell(gen["tpot_mean_s"], 3), _share_text(r.get("time_share", {})), cell(r["acc"], 3), cell(r["em"], 3),
            cell(r["f1"], 3)]


def _share_text(share: dict) -> str:
    """`time_share` (eval/bench/rag_metrics.py) as busy/busy/idle; empty for a run with no counters."""
    if isinstance(share.get("generate"), dict):  # isolated: busy share per process
        return "gen {} / emb {}".format(_pct(1 - share["generate"]["idle"]), _pct(1 - share["embed"]["idle"]))
    kinds = ("generator", "embedder") if "generator" in share else ("generate", "embed")  # an engine mode; hf
    return "/".join(_pct(share.get(kind)) for kind in (*kinds, "idle")) if share else "-"


HEADER = ["mode", "n", "q/s", "p50 s", "p90 s", "p99 s", "mean s", "goodput", "embed p50 s", "TTFT p50 s",
          "TPOT s", "busy gen/emb/idle", "Acc", "EM", "F1"]


def format_rag_table(bench: dict) -> str:
    """Markdown: one table per load, then the headline ratios."""
    slo = bench["config"]["workload"]["slo_s"]
    parts = [f"# rag benchmark: {bench['config']['pipeline']['name']}, {bench['config']['questions']} questions",
             f"goodput: share of questions answered within {slo:g} s; busy: step time by kind over wall time "
             "(isolated: each process's busy share)"]
    for entry in bench["sweep"]:
        modes = [entry["modes"][m] for m in _ordered(entry["modes"])]
        parts.append(f"## {entry['load']}\n\n" + markdown_table(HEADER, [mode_row(r) for r in modes]))
        parts.append(_ratios_text(entry["ratios"]))
    parts.append(f"## headline (p99 at {bench['headline']['p99']}, q/s at {bench['headline']['qps']})\n\n"
                 + _ratios_text(bench["ratios"]))
    return "\n\n".join(parts) + "\n"


def _ratios_text(r: dict) -> str:
    keys = [("p99_reduction_vs_isolated", "p99 reduction vs isolated", _pct),
            ("p99_reduction_vs_alternating", "vs alternating", _pct), ("p99_reduction_vs_hf", "vs hf", _pct),
            ("qps_hetero/isolated", "q/s hetero/isolated", lambda x: cell(x, 2, "x")),
            ("qps_hetero/hf", "q/s hetero/hf", lambda x: cell(x, 2, "x"))]
    return "; ".join(f"{label} {fmt(r.get(key))}" for key, label, fmt in keys if r.get(key) is not None)


def _ordered(modes: dict) -> list[str]:
    return [m for m in MODES if m in modes] + [m for m in modes if m not in MODES]


# ---- plots ------------------------------------------------------------------------------------------------------
def plot_latency_cdf(entry: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in _ordered(entry["modes"]):
        xs = sorted(entry["modes"][mode]["latencies_s"])
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=mode, color=COLORS.get(mode))
    ax.set(xlabel="question latency (s)", ylabel="fraction of questions", title=f"latency CDF, {entry['load']}")
    ax.legend()
    return _save(fig, path)


def plot_p99_vs_rate(sweep: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    points = sorted((e for e in sweep if e["rate"] is not None), key=lambda e: e["rate"])
    for mode in _ordered({m: 0 for e in points for m in e["modes"]}):
        xy = [(e["rate"], e["modes"][mode]["p99_s"]) for e in points if mode in e["modes"]]
        ax.plot(*zip(*xy), marker="o", label=mode, color=COLORS.get(mode))
    ax.set(xlabel="offered rate (questions/s)", ylabel="p99 question latency (s)", title="p99 against rate")
    ax.legend()
    return _save(fig, path)


def plot_step_composition(entry: dict, path: Path) -> Path | None:
    modes = [m for m in _ordered(entry["modes"]) if entry["modes"][m].get("timeline")]
    if not modes:
        return None
    fig, axes = plt.subplots(2, len(modes), figsize=(6 * len(modes), 6), sharex="col", squeeze=False)
    for col, mode in enumerate(modes):
        rows = step_spans(entry["modes"][mode]["timeline"])
        t = [r["t"] - r["dt"] for r in rows]
        per_step = {k: [r[k] / r["steps"] if r["steps"] else 0.0 for r in rows] for k in TOKEN_KINDS}
        axes[0][col].stackplot(t, *per_step.values(), labels=list(per_step),
                               colors=[COLORS[k] for k in per_step], step="post")
        axes[0][col].set(ylabel="tokens per step", title=f"{mode}: step composition, {entry['load']}")
        axes[0][col].legend(loc="upper right")
        axes[1][col].step(t, [min(1.0, r["busy_s"] / r["dt"]) if r["dt"] else 0 for r in rows], where="post")
        axes[1][col].set(xlabel="time since start (s)", ylabel="busy share", ylim=(0, 1.05))
    return _save(fig, path)


def step_spans(rows: list[dict]) -> list[dict]:
    """Timeline rows merged so that a step longer than the sampling interval fills the intervals it spans: it shows
    up in the sample after it ends, so intervals with no finished step while the engine held work are folded into
    the row where the step ends, its busy time spread over them. Idle intervals (no work held) stay as they are."""
    spans, pending = [], None
    for row in rows:
        if pending is None:
            pending = dict(row)
        else:
            pending = {k: pending[k] + row[k] for k in ("dt", "steps", "busy_s", *TOKEN_KINDS)} | {"t": row["t"]}
        if pending["steps"] or not row.get("in_flight", 1):
            spans.append(pending)
            pending = None
    return spans + ([pending] if pending else [])


def _save(fig, path: Path) -> Path:
    for ax in fig.axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---- files ------------------------------------------------------------------------------------------------------
def write_rag_reports(bench: dict, out_dir: Path) -> dict[str, Path]:
    """bench.json, bench.md and the plots into `out_dir`; returns what was written, by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"bench": out_dir / "bench.json", "table": out_dir / "bench.md"}
    paths["bench"].write_text(json.dumps(bench, indent=2) + "\n")
    paths["table"].write_text(format_rag_table(bench))
    head = next(e for e in bench["sweep"] if e["load"] == bench["headline"]["p99"])
    paths["latency_cdf"] = plot_latency_cdf(head, out_dir / "latency_cdf.png")
    if sum(e["rate"] is not None for e in bench["sweep"]) >= 2:
        paths["p99_vs_rate"] = plot_p99_vs_rate(bench["sweep"], out_dir / "p99_vs_rate.png")
    if composition := plot_step_composition(head, out_dir / "step_composition.png"):
        paths["step_composition"] = composition
    return paths


def merge_benches(benches: list[dict]) -> dict:
    """One rag bench from several (a rate of a sweep, or a mode, each): entries of one load (say a run per mode)
    joined, their ratios redone, sorted by rate, closed loop first; the headline redone."""
    if not benches or any(b.get("workload") != "rag" for b in benches):
        raise ValueError("give one or more bench.json files of workload rag")
    by_rate: dict = {}
    for entry in (e for b in benches for e in b["sweep"]):
        if (kept := by_rate.get(entry["rate"])) is not None:
            modes = {**kept["modes"], **entry["modes"]}
            entry = dict(kept, modes=modes, ratios=rag_ratios(modes))
        by_rate[entry["rate"]] = entry
    sweep = sorted(by_rate.values(), key=lambda e: -1 if e["rate"] is None else e["rate"])
    return dict(benches[0], sweep=sweep, **headline(sweep))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m orthrus_rag.eval.bench.report", description=__doc__.split("\n")[0])
    parser.add_argument("benches", nargs="+", type=Path, help="bench.json files of workload rag")
    parser.add_argument("--out", type=Path, required=True, help="folder for bench.json, bench.md and the plots")
    args = parser.parse_args(argv)
    if missing := [str(p) for p in args.benches if not p.is_file()]:
        parser.error(f"no such file: {', '.join(missing)}")
    bench = merge_benches([json.loads(p.read_text()) for p in args.benches])
    for name, path in write_rag_reports(bench, args.out).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
