"""Rebuild LEADERBOARD.md: one row per experiment config in conf/experiment/leaderboard/.

    python -m eval.leaderboard                                # orthrus-rag +experiment=leaderboard/<row>, each row
    python -m eval.leaderboard --rows ircot,standard_rag      # only these rows
    python -m eval.leaderboard --from-results /tmp/eval2wiki  # read <DIR>/**/results.json, run nothing

A row is a results.json (see DESIGN.md): pipeline, dataset, EM, F1, Acc, passage recall, p99 latency, questions/s,
and the config that produced it (every pipeline setting, models, split, limit, concurrency, policy). Rows are
sorted by Acc, then F1.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from orthrus_rag.cli.common import CONF_DIR

ROWS_DIR = CONF_DIR / "experiment" / "leaderboard"
DEFAULT_OUT = Path("LEADERBOARD.md")
HEADER = ["#", "pipeline", "dataset", "n", "EM", "F1", "Acc", "passage recall", "p99 s", "q/s", "config"]


@dataclass
class Row:
    source: str  # the results.json it came from
    results: dict

    @property
    def sort_key(self) -> tuple[float, float]:
        m = self.results["metrics"]
        return (-m["acc"], -m["f1"])


# ---- collecting results -----------------------------------------------------------------------------------------
def read_results(folder: Path) -> list[Row]:
    """Every results.json under `folder` (any depth)."""
    paths = sorted(folder.rglob("results.json"))
    if not paths:
        raise FileNotFoundError(f"no results.json under {folder}")
    return [Row(str(p), json.loads(p.read_text())) for p in paths]


def row_names(only: list[str] | None = None) -> list[str]:
    names = sorted(p.stem for p in ROWS_DIR.glob("*.yaml"))
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise ValueError(f"no leaderboard config for {unknown} in {ROWS_DIR}; have {names}")
    return [n for n in names if not only or n in only]


def run_experiments(names: list[str], out: Path, overrides: list[str]) -> list[Row]:
    """`orthrus-rag +experiment=leaderboard/<name>` for each row, results into out/<name>/."""
    command = shutil.which("orthrus-rag") or None
    base = [command] if command else [sys.executable, "-m", "eval.experiment"]
    rows = []
    for name in tqdm(names, desc="leaderboard", unit="row"):
        run_dir = out / name
        args = [*base, f"+experiment=leaderboard/{name}", f"hydra.run.dir={run_dir}", *overrides]
        tqdm.write(" ".join(args))
        subprocess.run(args, check=True)
        rows.append(Row(str(run_dir / "results.json"), json.loads((run_dir / "results.json").read_text())))
    return rows


# ---- the table --------------------------------------------------------------------------------------------------
def config_text(config: dict) -> str:
    """The row's settings: every pipeline setting, models, split, limit, concurrency and policy."""
    settings = [f"{k}={v}" for k, v in config.get("pipeline", {}).items() if k != "name"]
    data = config.get("dataset", {})
    runtime = config.get("runtime", {})
    parts = [" ".join(settings) or "-",
             f"{config.get('model', {}).get('name', '?')} + {config.get('embedder', {}).get('name') or 'backbone'}",
             f"split={data.get('split')} limit={data.get('limit')}",
             f"concurrency={config.get('concurrency')} policy={runtime.get('policy')}"]
    return "; ".join(parts)


def table_row(rank: int, row: Row) -> list[str]:
    r, m = row.results, row.results["metrics"]
    return [str(rank), r["pipeline"], f"{r['dataset']} {r['split']}", str(r["n"]),
            *(f"{m[k]:.3f}" for k in ("em", "f1", "acc", "recall")), f"{r['latency']['p99_s']:.1f}",
            f"{r['qps']:.3f}", config_text(r.get("config", {}))]


def render(rows: list[Row], how: str) -> str:
    rows = sorted(rows, key=lambda row: row.sort_key)
    lines = ["# Leaderboard", "",
             "Pipelines on the same questions with the shipped models (SmolLM2-135M-Instruct generator, "
             "all-MiniLM-L6-v2 retriever, exact inner-product search). EM, F1 and Acc (gold answer contained in the "
             "prediction) are fractions; passage recall is the share of gold passages among those given to the "
             "generator; p99 is question latency and q/s questions per second over the run, measured on a shared "
             "CPU machine and noisy across rows.", "",
             "| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(table_row(i + 1, row)) + " |" for i, row in enumerate(rows)]
    lines += ["", f"Rebuilt with `{how}`. Each row's config lives in `conf/experiment/leaderboard/`; "
              "`python -m eval.leaderboard` reruns them all, `--from-results DIR` rebuilds from existing "
              "results.json files.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m eval.leaderboard", description=__doc__.split("\n")[0])
    parser.add_argument("--from-results", type=Path, help="read results.json files under this folder; run nothing")
    parser.add_argument("--rows", help="comma-separated row names (default: every config in the rows folder)")
    parser.add_argument("--runs", type=Path, default=Path("outputs/leaderboard"), help="where new runs write")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the Markdown file to write")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. dataset.limit=20")
    args = parser.parse_args(argv)
    try:
        if args.from_results:
            rows = read_results(args.from_results)
            how = f"python -m eval.leaderboard --from-results {args.from_results}"
        else:
            rows = run_experiments(row_names(args.rows.split(",") if args.rows else None), args.runs, args.overrides)
            how = "python -m eval.leaderboard " + " ".join(args.overrides)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    args.out.write_text(render(rows, how.strip()))
    print(f"leaderboard: {args.out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
