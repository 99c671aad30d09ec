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

import contextlib
import dataclasses
import itertools
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from orthrus_rag.eval.experiment.datasets import DatasetSpec, read_questions
from orthrus_rag.eval.experiment.metrics import (MetricSettings, QuestionScores, aggregate, extra_results,
                                                prompt_tokens, score_answers)
from orthrus_rag.eval.experiment.predictions import PredictionLog
from orthrus_rag.cli.answering import RunOutput, execute
from orthrus_rag.cli.run_folder import RESULTS_FILE, SETTINGS_FILE, Earlier, earlier_runs, locked
from orthrus_rag.files import write_atomic
from orthrus_rag.launch import UserError, launch
from orthrus_rag.rag.remote import EndpointSettings
from orthrus_rag.settings import user_errors
from orthrus_rag.stack import StackPlan

APP = "orthrus-rag"
TRACE_CHARS = 160
# config keys that change no answer: how the run is driven and how it is scored
NOT_ANSWER_SETTINGS = ("resume", "overwrite", "concurrency", "workers", "allow_failures", "metrics", "hydra")
ENDPOINT_KEYS = tuple(f.name for f in dataclasses.fields(EndpointSettings))


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
    """The resolved config less the keys that change no answer (NOT_ANSWER_SETTINGS; dataset.limit: which questions
    are asked, not how; where the models run, the EndpointSettings keys of `model` and `embedder`: the same model
    answers the same there), as JSON values."""
    settings = {key: value for key, value in OmegaConf.to_container(cfg, resolve=True).items()
                if key not in NOT_ANSWER_SETTINGS}
    (settings.get("dataset") or {}).pop("limit", None)
    for group, key in itertools.product(("model", "embedder"), ENDPOINT_KEYS):
        (settings.get(group) or {}).pop(key, None)
    return json.loads(json.dumps(settings))


# ---- scoring and outputs ------------------------------------------------------------------------------------
def trace_summary(answer: Any) -> list[dict[str, Any]]:
    """Each retrieve/reason call: kind, a short input and output, seconds and tokens."""
    return [{"kind": e.kind, "input": _short(e.input), "output": _short(e.output),
             "duration_s": round(e.duration_s, 4), "prompt_tokens": e.prompt_tokens,
             "completion_tokens": e.completion_tokens, "cached_tokens": e.cached_tokens,
             "reused_tokens": e.reused_tokens, "recomputed_tokens": e.recomputed_tokens} for e in answer.trace]


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
                  answered_now: set[str], earlier: dict[str, Any] | None = None,
                  metrics: MetricSettings = MetricSettings()) -> dict[str, Any]:
    """results.json from the prediction rows (in question order) of the questions of `spec`; `run` is the part
    answered now (the questions `answered_now`; None when earlier runs had answered everything), `earlier` the
    results.json they left, `metrics` how the intervals are drawn."""
    from orthrus_rag.eval.bench.metrics import latency_stats

    scores = [QuestionScores(**row["scores"]) for row in rows]
    results = {"pipeline": cfg.pipeline.name, "dataset": cfg.dataset.name, "split": cfg.dataset.split,
               "n": len(questions), "failed": sum(row["error"] is not None for row in rows),
               "metrics": aggregate(scores),
               "latency": latency_stats([row["latency_s"] for row in rows]),
               "prompt_tokens": prompt_tokens([e for row in rows for e in row["trace"]], len(rows)),
               **run_figures(run, len(answered_now), earlier), "config": OmegaConf.to_container(cfg, resolve=True)}
    if run is None and earlier is not None:  # nothing answered now: the figures, and what they cover, as measured
        results.update({k: earlier[k] for k in ("resumed",) if k in earlier})
    elif len(answered_now) < len(rows):  # latency covers every question; qps, wall_s and engine the part answered now
        results["resumed"] = {"answered_before": len(rows) - len(answered_now), "answered_now": len(answered_now),
                              "latency_now": latency_stats([r["latency_s"] for r in rows if r["id"] in answered_now])}
    results.update(extra_results(spec, questions, scores, metrics))
    return results


def run_figures(run: RunOutput | None, answered_now: int, earlier: dict[str, Any] | None) -> dict[str, Any]:
    """q/s, wall time and engine counters of the part answered now; when nothing was, those of the run that answered
    (its results.json), or 0, 0 and {} when it left none."""
    if run is not None:
        return {"qps": answered_now / run.wall_s if run.wall_s > 0 else 0.0, "wall_s": run.wall_s,
                "engine": run.engine_stats}
    earlier = earlier or {}
    return {"qps": earlier.get("qps", 0.0), "wall_s": earlier.get("wall_s", 0.0), "engine": earlier.get("engine", {})}


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
    resume = _checked(cfg, "resume", False, lambda v: v is True or v is False or v == "force", "true, false or force")
    allow_failures, overwrite = (_checked(cfg, key, False, lambda v: isinstance(v, bool), "true or false")
                                 for key in ("allow_failures", "overwrite"))
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    with locked(out_dir):
        log, settings = PredictionLog(out_dir), answer_settings(cfg)
        earlier = earlier_runs(log, settings, resume, overwrite)
        done = {qid: row for qid, row in earlier.rows.items() if row.get("error") is None}
        selected = {q.id for q in questions}
        kept = [done[q.id] for q in questions if q.id in done]
        others = [row for qid, row in earlier.rows.items() if qid not in selected]  # kept too, after this run's
        todo = [q for q in questions if q.id not in done]
        _say_what_is_kept(log, len(questions), kept, others, todo, earlier)
        with _writing(out_dir):
            write_atomic(out_dir / SETTINGS_FILE, json.dumps(settings, indent=2) + "\n")
            log.start(kept + others)
        output, new_rows = answer_logged(plan, todo, workers, concurrency, log, len(kept) + len(others))
        order = {q.id: i for i, q in enumerate(questions)}
        rows = sorted(kept + list(new_rows.values()), key=lambda r: order[r["id"]])
        results = build_results(cfg, spec, questions, rows, output, set(new_rows), earlier.results, metrics)
        with _writing(out_dir):  # results.json first: a run stopped between the two keeps its measured figures
            path = write_atomic(out_dir / RESULTS_FILE, json.dumps(results, indent=2) + "\n")
            log.finish(rows + others)
    print(format_table(results))
    print(f"results: {path}\npredictions: {log.path}", flush=True)
    if results["failed"] and not allow_failures:
        raise UserError(f"{results['failed']} of {len(questions)} questions failed (their 'error' is in {log.path});"
                        " the files are written. Rerun the same command with resume=true to retry them, or set "
                        "allow_failures=true to accept them")
    return results


def _say_what_is_kept(log: PredictionLog, n: int, kept: list, others: list, todo: list, earlier: Earlier) -> None:
    if kept and todo:
        print(f"resuming: {len(kept)} of {n} questions already answered in {log.path}")
    elif kept:
        figures = ("the q/s, wall time and engine counters of the run that answered them" if earlier.results else
                   "q/s, wall time and engine counters 0 (no results.json recorded them)")
        print(f"resuming: all {n} questions already answered in {log.path}: nothing is asked; results.json is "
              f"rebuilt from their rows, with {figures}")
    if others:
        print(f"keeping {len(others)} answers to questions outside this selection (dataset.limit) in {log.path}")


def _writing(folder: Path):
    """A failed write (a full disk) as one line; what the folder held stays (every file is replaced atomically)."""
    return user_errors(OSError, prefix=f"could not write in {folder}: ", suffix="; nothing written before is lost: "
                       "free space, then rerun the same command with resume=true")


class LogWriteError(Exception):
    """An answer could not be appended to predictions.jsonl."""


def answer_logged(plan: StackPlan, todo: list, workers: int, concurrency: int | None, log: PredictionLog,
                  logged: int) -> tuple[RunOutput | None, dict[str, dict]]:
    """Answer `todo`, each row appended to `log` (which holds `logged` rows) as it completes; the run's output and the
    new rows by question id. A failed append (a full disk) stops the run: the questions in flight are cancelled,
    the log is closed with every row written before, and a UserError says how to finish."""
    new_rows: dict[str, dict] = {}

    def on_answer(i: int, answer: Any) -> None:
        row = scored_row(todo[i], answer)
        try:
            log.append(row)
        except OSError as error:
            raise LogWriteError(error) from error
        new_rows[todo[i].id] = row

    try:
        return (execute(plan, todo, workers, concurrency, on_answer) if todo else None), new_rows
    except BaseException as error:
        with contextlib.suppress(OSError):
            log.close()
        if isinstance(error, LogWriteError):
            raise UserError(f"could not write {log.path}: {error}; the run stopped, and the {logged + len(new_rows)} "
                            "answers written before are kept: free space, then rerun the same command with "
                            "resume=true") from None
        raise


def main() -> None:
    launch(APP, "config", run)


if __name__ == "__main__":
    main()
