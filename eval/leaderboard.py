"""Rebuild a leaderboard: one row per experiment config in its rows folder. Two boards: `smollm2` (LEADERBOARD.md,
conf/experiment/leaderboard/, leaderboard/results/) and `qwen05` (LEADERBOARD_QWEN05.md,
conf/experiment/leaderboard_qwen05/, leaderboard/results_qwen05/). Running the rows (`--rows a,b`, Hydra overrides
such as `workers=4` for every run) and rebuilding a board byte for byte from its results folder (`--from-results`):
docs/results.md (Leaderboard) and leaderboard/README.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from tqdm import tqdm

from orthrus_rag.files import write_atomic
from orthrus_rag.launch import CONF_DIR

from .experiment.markdown import markdown_table


@dataclass(frozen=True)
class Board:
    """One leaderboard: its row configs (conf/experiment/<rows>/), its committed results and its Markdown file."""
    name: str
    title: str
    rows: str
    results: Path
    out: Path


BOARDS = {board.name: board for board in (
    Board("smollm2", "Leaderboard", "leaderboard", Path("leaderboard/results"), Path("LEADERBOARD.md")),
    Board("qwen05", "Leaderboard: Qwen2.5-Coder-0.5B-Instruct", "leaderboard_qwen05",
          Path("leaderboard/results_qwen05"), Path("LEADERBOARD_QWEN05.md")))}
METRIC_COLUMNS = [("em", "EM"), ("f1", "F1"), ("acc", "Acc"), ("acc_substring", "Acc (substring)"),
                  ("recall", "passage recall"), ("all_gold", "all-gold")]
HEADER = ["#", "pipeline", "dataset", "n", *(label for _, label in METRIC_COLUMNS), "p99 s", "q/s", "config"]
DROPPED_KEYS = ("predictions",)  # raw per-question outputs stay in the run folder
NOT_RECORDED = "not recorded"


@dataclass
class Row:
    name: str  # the row config's name, or the run folder's
    results: dict


# ---- collecting results -----------------------------------------------------------------------------------------
def read_results(folder: Path) -> list[Row]:
    """Every results file under `folder` (any depth): `<row>.json` files, or `results.json` in run folders."""
    rows = []
    for path in sorted(Path(folder).rglob("*.json")):
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error}): remove it or rerun its row") from error
        if isinstance(results, dict) and {"pipeline", "metrics"} <= results.keys():
            refuse_failures(path, results)
            rows.append(Row(path.parent.name if path.name == "results.json" else path.stem, results))
    if not rows:
        raise FileNotFoundError(f"no results.json files under {folder}")
    return rows


def row_names(only: list[str] | None = None, board: Board = BOARDS["smollm2"]) -> list[str]:
    rows_dir = CONF_DIR / "experiment" / board.rows
    names = sorted(p.stem for p in rows_dir.glob("*.yaml") if not p.stem.startswith("_"))
    if unknown := sorted(set(only or []) - set(names)):
        raise ValueError(f"no leaderboard config for {unknown} in {rows_dir}; have {names}")
    return [n for n in names if not only or n in only]


def run_experiments(names: list[str], rows: str, runs: Path, results_dir: Path, overrides: list[str]) -> None:
    """`python -m orthrus_rag.cli.run +experiment=<rows>/<name>` for each row, one after another, each run into
    runs/<name>/ and its results.json saved as results_dir/<name>.json."""
    for name in tqdm(names, desc="leaderboard", unit="row"):
        run_dir = runs / name
        args = [sys.executable, "-m", "orthrus_rag.cli.run", f"+experiment={rows}/{name}",
                f"hydra.run.dir={run_dir}", *overrides]
        tqdm.write(" ".join(args))
        if subprocess.run(args).returncode != 0:
            raise RuntimeError(f"row {name!r} failed (its output is above); rows before it were saved. Its run "
                               f"folder {run_dir} keeps every answer written: rerun with resume=true to finish it, or "
                               "with overwrite=true to start its rows again")
        save_row(run_dir / "results.json", results_dir / f"{name}.json")


def save_row(source: Path, target: Path) -> Path:
    """A run's results.json, without raw predictions, as a committed leaderboard row (written atomically)."""
    results = {k: v for k, v in json.loads(source.read_text(encoding="utf-8")).items() if k not in DROPPED_KEYS}
    refuse_failures(source, results)
    return write_atomic(target, json.dumps(results, indent=2, ensure_ascii=False) + "\n")


def refuse_failures(path: Path, results: dict) -> None:
    """A row is published only when every question was answered."""
    if results.get("failed"):
        raise ValueError(f"{path}: {results['failed']} of {results.get('n')} questions failed, so the row is not "
                         "published; rerun its experiment with resume=true (same hydra.run.dir) to answer them")


# ---- the table --------------------------------------------------------------------------------------------------
def config_text(config: dict) -> str:
    """The row's settings: every pipeline setting, models, split, limit, concurrency, policy (and workers)."""
    settings = [f"{k}={v}" for k, v in config.get("pipeline", {}).items() if k != "name"]
    models = f"{config.get('model', {}).get('name', '?')} + {config.get('embedder', {}).get('name') or 'backbone'}"
    data, policy = config.get("dataset", {}), config.get("runtime", {}).get("policy")
    return "; ".join([" ".join(settings) or "-", models, f"split={data.get('split')} limit={data.get('limit')}",
                      f"concurrency={config.get('concurrency')} policy={policy}" + _workers_text(config)])


def _workers_text(config: dict, form: str = " workers={}") -> str:
    """`form` for a row run over N Ray actors; nothing for a local run (and rows from before `workers` existed)."""
    workers = config.get("workers", 1)
    return form.format(workers) if workers != 1 else ""


def metric_cell(results: dict, key: str) -> str:
    """`0.123 [0.080, 0.170]`: the mean and its 95% bootstrap interval, when the run recorded one."""
    value = results["metrics"].get(key)
    if value is None:
        return "-"
    bounds = results.get("ci", {}).get("bounds", {}).get(key)
    return f"{value:.3f}" + (f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "")


def table_row(rank: int, row: Row) -> list[str]:
    r = row.results
    return [str(rank), r["pipeline"], f"{r['dataset']} {r['split']}", str(r["n"]),
            *(metric_cell(r, key) for key, _ in METRIC_COLUMNS), f"{r['latency']['p99_s']:.1f}",
            f"{r['qps']:.3f}", config_text(r.get("config", {}))]


# ---- the header: facts read from the runs -----------------------------------------------------------------------
def _get(results: dict, *keys: str):
    for key in keys:
        results = results.get(key) if isinstance(results, dict) else None
    return results


def models_fact(r: dict) -> str:
    embedder = _get(r, "config", "embedder", "name") or "the generator's own layers (backbone)"
    return f"generator `{_get(r, 'config', 'model', 'name')}`, embedder `{embedder}`"


def runtime_fact(r: dict) -> str:
    runtime = _get(r, "config", "runtime") or {}
    threads = runtime.get("num_threads") or "torch's default"
    dtype = _get(r, "engine", "dtype") or runtime.get("dtype")  # the engine's record: `auto` resolved
    return (f"dtype {dtype}, device {runtime.get('device')}, torch threads {threads}, "
            f"policy {runtime.get('policy')}, max_num_batched_tokens {runtime.get('max_num_batched_tokens')}, "
            f"concurrency {_get(r, 'config', 'concurrency')}" + _workers_text(r.get("config", {}), " workers {}"))


def corpus_fact(r: dict) -> str:
    corpus = _get(r, "data", "corpus")
    if not corpus or corpus.get("passages") is None:
        return NOT_RECORDED
    return f"`{corpus['file']}`, {corpus['passages']:,} passages (fingerprint {corpus['fingerprint']})"


def questions_fact(r: dict) -> str:
    q = _get(r, "data", "questions")
    if not q or q.get("split_size") is None:
        return NOT_RECORDED
    which = "all" if q["answered"] == q["split_size"] else f"the first {q['answered']} of"
    return f"{r['dataset']} {q['split']} split: {which} {q['split_size']:,} questions ({q['total']:,} in `{q['file']}`)"


def machine_fact(r: dict) -> str:
    m = _get(r, "run", "machine")
    if not m:
        return NOT_RECORDED
    gpu = f", GPU {m['gpu']}" if m.get("gpu") else ""
    return f"{m['cpu']}, {m['cores']} cores{gpu}"


def software_fact(r: dict) -> str:
    run = r.get("run")
    return f"torch {run['torch']}, transformers {run['transformers']}, Python {run['python']}" if run else NOT_RECORDED


def commit_fact(r: dict) -> str:
    commit = _get(r, "run", "git_commit")
    if not commit:
        return NOT_RECORDED
    return f"`{commit[:10]}`" + (" with uncommitted changes" if _get(r, "run", "git_dirty") else "")


def index_fact(r: dict) -> str:
    """The dense index and how the row retrieved (`index.retrieval`; results from before it existed: dense)."""
    index = _get(r, "config", "index") or {}
    retrieval = index.get("retrieval", "dense")
    fused = f" (rrf_k {index.get('rrf_k')}, {index.get('candidates')} candidates a side)" if retrieval == "hybrid" else ""
    return f"FAISS `{index.get('factory')}`, {retrieval} retrieval{fused}"


FACTS = [("Models", models_fact), ("Runtime", runtime_fact), ("Index", index_fact), ("Corpus", corpus_fact),
         ("Questions", questions_fact), ("Machine", machine_fact), ("Software", software_fact),
         ("Commit", commit_fact), ("Date (UTC)", lambda r: (_get(r, "run", "date") or NOT_RECORDED)[:10])]


def fact_line(label: str, values: list[str]) -> str:
    """`- label: value` when every row agrees, else each value with the table rows it holds for."""
    if len(set(values)) == 1:
        return f"- {label}: {values[0]}"
    ranks: dict[str, list[int]] = {}
    for rank, value in enumerate(values, 1):
        ranks.setdefault(value, []).append(rank)
    parts = [f"{value} (row{'s' if len(r) > 1 else ''} {', '.join(map(str, r))})" for value, r in ranks.items()]
    return f"- {label}: " + "; ".join(parts)


def timing_fact(rows: list[Row]) -> str:
    """Whether the rows' answering phases ([date - wall_s, date]) overlapped in time, and the machine's load."""
    spans = []
    for rank, row in enumerate(rows, 1):
        date, wall = _get(row.results, "run", "date"), row.results.get("wall_s")
        if date is None or wall is None:
            return f"- Timing: {NOT_RECORDED}; compare p99 and q/s across rows with care"
        end = datetime.fromisoformat(date)
        spans.append((end - timedelta(seconds=wall), end, rank))
    overlaps = [f"{a[2]} and {b[2]}" for i, a in enumerate(spans) for b in spans[i + 1:] if a[0] < b[1] and b[0] < a[1]]
    loads = [_get(row.results, "run", "machine", "load_avg") for row in rows]
    load = (f"; 1-minute load average at the end of each run {min(x[0] for x in loads):.2f} to "
            f"{max(x[0] for x in loads):.2f} (other work on the machine raises p99 and lowers q/s)"
            if all(loads) else "")
    if overlaps:
        return (f"- Timing: rows ran side by side (rows {', '.join(overlaps)} overlapped): p99 and q/s compare only "
                f"between rows that ran alone{load}")
    return f"- Timing: rows ran one at a time (no two rows' answering overlapped){load}"


def type_table(rows: list[Row]) -> list[str]:
    """Acc per question type (each results.json's `by_type`), rows in the main table's order; nothing when no row
    recorded types. A column's n is its first row's (every row answers the same questions)."""
    kinds = sorted({kind for row in rows for kind in row.results.get("by_type", {})})
    if not kinds:
        return []
    counts = {kind: next(row.results["by_type"][kind]["n"] for row in rows if kind in row.results.get("by_type", {}))
              for kind in kinds}
    header = ["#", "pipeline", *(f"{kind} (n={counts[kind]})" for kind in kinds)]
    cells = []
    for rank, row in enumerate(rows, 1):
        by_type = row.results.get("by_type", {})
        cells.append([str(rank), row.results["pipeline"],
                      *(f"{by_type[kind]['acc']:.3f}" if kind in by_type else "-" for kind in kinds)])
    return ["", "## Acc by question type", "", markdown_table(header, cells)]


def render(rows: list[Row], board: Board = BOARDS["smollm2"]) -> str:
    """The board's Markdown for these rows: a function of the results alone, so equal results give equal bytes."""
    rows = sorted(rows, key=lambda row: (-row.results["metrics"]["acc"], -row.results["metrics"]["f1"],
                                         row.results["pipeline"], row.name))
    lines = [f"# {board.title}", "",
             "Pipelines on the same questions. EM and F1 are the official 2WikiMultihopQA scorer's; Acc counts a "
             "gold answer found as whole words in the prediction, Acc (substring) a gold answer found anywhere in it "
             "(both after normalisation; every score is the best over the answer and its aliases). Passage recall is "
             "the share of gold passages among those given to the generator; all-gold the share of questions with "
             "every gold passage. Brackets: 95% bootstrap confidence intervals over questions. p99 is question "
             "latency in seconds and q/s questions per second over the run.", "",
             *(fact_line(label, [fact(row.results) for row in rows]) for label, fact in FACTS), timing_fact(rows), "",
             markdown_table(HEADER, [table_row(rank, row) for rank, row in enumerate(rows, 1)]), *type_table(rows)]
    command = "python -m orthrus_rag.eval.leaderboard" + ("" if board.name == "smollm2" else f" --board {board.name}")
    lines += ["", f"Each row's settings live in `conf/experiment/{board.rows}/` (shared ones in `_pinned.yaml`) and "
              f"its results in `{board.results}/<row>.json`. `{command}` reruns every row one after another and "
              f"rebuilds this file; `{command} --from-results {board.results}` rebuilds it from the committed "
              "results.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m orthrus_rag.eval.leaderboard", description=__doc__.split("\n")[0])
    parser.add_argument("--board", choices=sorted(BOARDS), default="smollm2",
                        help="which leaderboard: its rows folder, results folder and Markdown file")
    parser.add_argument("--from-results", type=Path, help="read results files under this folder; run nothing")
    parser.add_argument("--rows", help="comma-separated row names (default: every config in the rows folder)")
    parser.add_argument("--runs", type=Path, help="where new runs write (default: outputs/<the board's rows>)")
    parser.add_argument("--results", type=Path, help="where each row's results are kept (default: the board's)")
    parser.add_argument("--out", type=Path, help="the Markdown file to write (default: the board's)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. dataset.limit=20")
    args = parser.parse_args(argv)
    board = BOARDS[args.board]
    results, out = args.results or board.results, args.out or board.out
    try:
        if not args.from_results:
            run_experiments(row_names(args.rows.split(",") if args.rows else None, board), board.rows,
                            args.runs or Path("outputs") / board.rows, results, args.overrides)
        rows = read_results(args.from_results or results)
    except (FileNotFoundError, ValueError, RuntimeError) as error:
        parser.error(str(error))
    write_atomic(out, render(rows, board))
    print(f"leaderboard: {out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
