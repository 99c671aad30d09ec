"""`orthrus-rag`: one pipeline over a question set, scored, with results.json and predictions.jsonl in the run dir.

    orthrus-rag                                              # IRCoT on the embedded demo set
    orthrus-rag pipeline=standard_rag pipeline.k=10
    orthrus-rag dataset=2wiki dataset.split=test dataset.limit=200
    orthrus-rag -m pipeline=no_retrieval,standard_rag,ircot,iter_retgen
    orthrus-rag dataset=2wiki workers=4                      # the questions over 4 Ray actors (answering.py)
    orthrus-rag dataset=2wiki hydra.run.dir=outputs/run1 resume=true   # continue an interrupted run

Writing the files as it goes, resuming, and failed questions: docs/experiments.md#interrupted-runs-lose-nothing.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from eval.datasets import DatasetSpec, read_questions
from eval.metrics import MetricSettings, QuestionScores, aggregate, extra_results, score_answers
from eval.predictions import PredictionLog
from orthrus_rag.cli.answering import RunOutput, execute
from orthrus_rag.files import write_atomic
from orthrus_rag.launch import UserError, launch
from orthrus_rag.stack import StackPlan

APP = "orthrus-rag"
TRACE_CHARS = 160
SETTINGS_FILE = "settings.json"  # beside predictions.jsonl: the settings its answers were made with
# config keys that change no answer: how the run is driven and how it is scored
NOT_ANSWER_SETTINGS = ("resume", "concurrency", "workers", "allow_failures", "metrics", "hydra")


# ---- the run ------------------------------------------------------------------------------------------------
def _checked(cfg: DictConfig, key: str, default: Any, fits: Callable[[Any], bool], expected: str) -> Any:
    """`cfg[key]` (`default` when unset); a UserError naming the key unless `fits(value)`."""
    value = cfg.get(key, default)
    if not fits(value):
        raise UserError(f"{key}: expected {expected}, got {value!r}")
    return value


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


# ---- resuming -----------------------------------------------------------------------------------------------
def answer_settings(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config less the keys that change no answer (NOT_ANSWER_SETTINGS, and dataset.limit: which
    questions are asked, not how), as JSON values."""
    settings = {key: value for key, value in OmegaConf.to_container(cfg, resolve=True).items()
                if key not in NOT_ANSWER_SETTINGS}
    (settings.get("dataset") or {}).pop("limit", None)
    return json.loads(json.dumps(settings))


def check_resumable(path: Path, settings: dict[str, Any]) -> None:
    """Refuse to resume when the settings saved at `path` differ from this run's (no saved settings: a folder
    from before they were saved, resumed as it is)."""
    if not path.is_file():
        return
    before, now = _flat(json.loads(path.read_text(encoding="utf-8"))), _flat(settings)
    keys = sorted(k for k in before.keys() | now.keys() if k not in before or k not in now or before[k] != now[k])
    if keys:
        differ = "; ".join(f"{k} ({_shown(before, k)} then, {_shown(now, k)} now)" for k in keys)
        raise UserError(f"resume=true: the answers in {path.parent} were made with other settings: {differ}. "
                        "Resume with the same settings, or run these in a new folder (another hydra.run.dir)")


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as {"group.key": value}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _shown(settings: dict[str, Any], key: str) -> str:
    return repr(settings[key]) if key in settings else "unset"


# ---- scoring and outputs ------------------------------------------------------------------------------------
def trace_summary(answer: Any) -> list[dict[str, Any]]:
    """Each retrieve/reason call: kind, a short input and output, seconds and tokens."""
    return [{"kind": e.kind, "input": _short(e.input), "output": _short(e.output),
             "duration_s": round(e.duration_s, 4), "prompt_tokens": e.prompt_tokens,
             "completion_tokens": e.completion_tokens} for e in answer.trace]


def _short(text: str) -> str:
    return text if len(text) <= TRACE_CHARS else text[:TRACE_CHARS] + "..."


def scored_row(question: Any, answer: Any) -> dict[str, Any]:
    """The predictions.jsonl row of one answered question, scored."""
    scores = score_answers([question], [answer])[0]
    return {"id": question.id, "question": question.question, "answer": question.answer,
            "aliases": question.aliases, "prediction": answer.prediction,
            "passages": [p.title or p.id for p in answer.passages], "gold_titles": question.gold_titles,
            "scores": asdict(scores), "latency_s": answer.latency_s, "queue_s": answer.queue_s,
            "calls": answer.num_calls, "trace": trace_summary(answer), "error": answer.error}


def build_results(cfg: DictConfig, spec: DatasetSpec, questions: list, rows: list[dict], run: RunOutput | None,
                  resumed: int, metrics: MetricSettings = MetricSettings()) -> dict[str, Any]:
    """results.json from the prediction rows (in question order) of the questions of `spec`; `run` is the part
    answered now (None when an earlier run had answered everything), `resumed` how many rows came from the earlier
    run, `metrics` how the intervals are drawn."""
    from eval.bench.metrics import latency_stats

    scores = [QuestionScores(**row["scores"]) for row in rows]
    answered_now = len(rows) - resumed
    wall_s = run.wall_s if run else 0.0
    results = {"pipeline": cfg.pipeline.name, "dataset": cfg.dataset.name, "split": cfg.dataset.split,
               "n": len(questions), "failed": sum(row["error"] is not None for row in rows),
               "metrics": aggregate(scores),
               "latency": latency_stats([row["latency_s"] for row in rows]),
               "qps": answered_now / wall_s if wall_s > 0 else 0.0, "wall_s": wall_s,
               "engine": run.engine_stats if run else {}, "config": OmegaConf.to_container(cfg, resolve=True)}
    if resumed:  # latency covers every question; qps, wall_s and engine the part answered now
        results["resumed"] = {"answered_before": resumed, "answered_now": answered_now,
                              "latency_now": latency_stats([row["latency_s"] for row in rows[resumed:]])}
    results.update(extra_results(spec, questions, scores, metrics))
    return results


def format_table(results: dict[str, Any]) -> str:
    m, lat = results["metrics"], results["latency"]
    head = ["pipeline", "dataset", "split", "n", "EM", "F1", "Acc", "recall", "all-gold", "p50 s", "p99 s", "q/s"]
    row = [results["pipeline"], results["dataset"], results["split"], str(results["n"]),
           *(f"{m[k]:.3f}" for k in ("em", "f1", "acc", "recall", "all_gold")),
           f"{lat['p50_s']:.2f}", f"{lat['p99_s']:.2f}", f"{results['qps']:.3f}"]
    widths = [max(len(a), len(b)) for a, b in zip(head, row)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in (head, row))


def run(cfg: DictConfig) -> dict[str, Any]:
    spec = DatasetSpec.from_config(cfg.dataset)
    questions = read_questions(spec)
    plan = StackPlan.from_config(cfg, spec.corpus)  # every setting checked before anything loads
    metrics = MetricSettings.from_config(cfg)
    workers = _checked(cfg, "workers", 1, _positive, "a positive integer (1: this process, N>1: N Ray actors)")
    concurrency = _checked(cfg, "concurrency", None, lambda v: v is None or _positive(v), "a positive integer "
                           "(questions in flight at once, on each worker) or null (all at once)")
    resume, allow_failures = (_checked(cfg, key, False, lambda v: isinstance(v, bool), "true or false")
                              for key in ("resume", "allow_failures"))
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    log, settings = PredictionLog(out_dir), answer_settings(cfg)
    if resume:
        check_resumable(out_dir / SETTINGS_FILE, settings)
    done = log.answered() if resume else {}
    kept = [done[q.id] for q in questions if q.id in done]
    todo = [q for q in questions if q.id not in done]
    if kept:
        print(f"resuming: {len(kept)} of {len(questions)} questions already answered in {log.path}")
    write_atomic(out_dir / SETTINGS_FILE, json.dumps(settings, indent=2) + "\n")
    log.start(kept)
    new_rows: dict[str, dict] = {}

    def on_answer(i: int, answer: Any) -> None:
        new_rows[todo[i].id] = row = scored_row(todo[i], answer)
        log.append(row)

    output = execute(plan, todo, workers, concurrency, on_answer) if todo else None
    order = {q.id: i for i, q in enumerate(questions)}
    rows = sorted(kept + [new_rows[q.id] for q in todo], key=lambda r: order[r["id"]])
    results = build_results(cfg, spec, questions, rows, output, len(kept), metrics)
    log.finish(rows)
    path = write_atomic(out_dir / "results.json", json.dumps(results, indent=2) + "\n")
    print(format_table(results))
    print(f"results: {path}\npredictions: {log.path}", flush=True)
    if results["failed"] and not allow_failures:
        raise UserError(f"{results['failed']} of {len(questions)} questions failed (their 'error' is in {log.path});"
                        " the files are written. Rerun the same command with resume=true to retry them, or set "
                        "allow_failures=true to accept them")
    return results


def main() -> None:
    launch(APP, "config", run)


if __name__ == "__main__":
    main()
