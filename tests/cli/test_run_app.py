"""`orthrus-rag` end to end on the tiny random models: results.json, predictions.jsonl, sweeps and user errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orthrus_rag.cli.run import main

SMALL = ["dataset.limit=3", "pipeline.max_tokens=6", "pipeline.num_demos=0", "concurrency=2"]
METRICS = {"em", "f1", "acc", "acc_substring", "recall", "all_gold"}
ROW_KEYS = {"id", "question", "answer", "prediction", "passages", "scores", "latency_s", "calls", "trace"}


def read_results(folder: Path) -> tuple[dict, list[dict]]:
    results = json.loads((folder / "results.json").read_text())
    lines = (folder / "predictions.jsonl").read_text().splitlines()
    return results, [json.loads(line) for line in lines]


def check_results(results: dict, pipeline: str, n: int) -> None:
    assert (results["pipeline"], results["dataset"], results["split"], results["n"]) == (pipeline, "demo", "all", n)
    assert set(results["metrics"]) == METRICS
    assert all(0.0 <= v <= 1.0 for v in results["metrics"].values())
    assert set(results["latency"]) == {"mean_s", "p50_s", "p90_s", "p99_s"}
    assert 0 < results["latency"]["p50_s"] <= results["latency"]["p99_s"]
    assert results["qps"] > 0
    assert results["engine"]["steps"] > 0 and results["engine"]["tokens"]["prefill"] > 0
    assert results["config"]["pipeline"]["name"] == pipeline and results["config"]["dataset"]["limit"] == n


def test_ircot_on_the_demo_writes_results_and_predictions(run_app, tiny_models, tmp_path, capsys):
    out = tmp_path / "run"
    run_app(main, "orthrus-rag", *tiny_models, *SMALL, "pipeline.max_steps=2", "pipeline.reader_num_demos=0",
            f"hydra.run.dir={out}")
    results, rows = read_results(out)
    check_results(results, "ircot", 3)
    assert results["engine"]["tokens"]["embed"] > 0  # the index was built and queried through the engine
    assert [row["id"] for row in rows] == ["demo-q01", "demo-q02", "demo-q03"]
    for row in rows:
        assert ROW_KEYS <= set(row) and set(row["scores"]) == METRICS
        assert isinstance(row["prediction"], str) and 1 <= len(row["passages"]) <= 12
        assert row["trace"][0]["kind"] == "retrieve" and row["calls"]["reason"] >= 1
    printed = capsys.readouterr().out
    assert "ircot" in printed and str(out / "results.json") in printed


def test_sweep_over_pipelines_writes_one_run_dir_each(run_app, tiny_models, tmp_path):
    sweep = tmp_path / "sweep"
    run_app(main, "orthrus-rag", "-m", "pipeline=no_retrieval,standard_rag", *tiny_models, *SMALL,
            "pipeline.max_tokens=4", f"hydra.sweep.dir={sweep}")
    folders = sorted(p.parent for p in sweep.glob("*/results.json"))
    assert [f.name for f in folders] == ["0-no_retrieval-demo", "1-standard_rag-demo"]
    no_retrieval, _ = read_results(folders[0])
    standard, rows = read_results(folders[1])
    check_results(no_retrieval, "no_retrieval", 3)
    check_results(standard, "standard_rag", 3)
    assert no_retrieval["metrics"]["recall"] == 0.0 and all(len(r["passages"]) == 5 for r in rows)


def test_unknown_pipeline_setting_is_a_one_line_error(run_app, tiny_models, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_app(main, "orthrus-rag", *tiny_models, "pipeline=standard_rag", "+pipeline.depth=3",
                f"hydra.run.dir={tmp_path / 'run'}")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "orthrus-rag: error: pipeline:" in err and "depth" in err and "Traceback" not in err


@pytest.mark.parametrize("override, message", [
    ("dataset.limit=abc", "dataset.limit: expected an integer or null, got 'abc'"),
    ("pipeline.k=abc", "pipeline.k: expected an integer, got 'abc'"),
    ("pipeline.demo_turns=maybe", "pipeline.demo_turns: expected true or false, got 'maybe'"),
    ("runtime.max_num_seqs=abc", "runtime.max_num_seqs: expected an integer, got 'abc'"),
    ("+runtime.speed=3", "runtime: no setting 'speed' (runtime.speed)"),
    ("index.batch_size=1.5", "index.batch_size: expected an integer, got 1.5"),
    ("index.batch_size=0", "index.batch_size must be >= 1, got 0"),
    ("embedder.pooling=foo", "embedder.pooling: pooling must be one of"),
    ("dataset.limit=-1", "dataset.limit: expected null (every question of the split) or an integer >= 0, got -1"),
    ("concurrency=0", "concurrency: expected a positive integer"),
    ("concurrency=abc", "concurrency: expected a positive integer"),
    ("allow_failures=maybe", "allow_failures: expected true or false, got 'maybe'"),
    ("+metrics.bootstrap_seed=abc", "metrics.bootstrap_seed: expected an integer, got 'abc'"),
    ("+metrics.bootstrap_resamples=0", "metrics.bootstrap_resamples must be >= 1, got 0"),
    ("+metrics.resamples=5", "metrics: no setting 'resamples'"),
])
def test_a_value_of_the_wrong_type_is_a_one_line_error_naming_the_key(run_app, tiny_models, tmp_path, capsys,
                                                                     override, message):
    with pytest.raises(SystemExit) as exit_info:
        run_app(main, "orthrus-rag", *tiny_models, "pipeline=standard_rag", override,
                f"hydra.run.dir={tmp_path / 'run'}")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err  # one line, before anything loads (no "loading ..." line) or is written
    assert err.startswith(f"orthrus-rag: error: {message}") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_a_failing_question_is_recorded_and_counted(tmp_path):
    from orthrus_rag.eval.experiment.datasets import DatasetSpec, Question
    from orthrus_rag.cli.answering import RunOutput
    from orthrus_rag.cli.run import build_results, scored_row
    from orthrus_rag.eval.experiment.predictions import PredictionLog
    from orthrus_rag.rag import Answer
    from hydra import compose, initialize_config_dir

    from orthrus_rag.launch import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config")
    questions = [Question("q1", "Who?", "Ann"), Question("q2", "Where?", "Oslo")]
    answers = [Answer("Who?", "Ann"), Answer("Where?", "", error="RuntimeError: boom")]
    rows = [scored_row(q, a) for q, a in zip(questions, answers)]
    spec = DatasetSpec.from_config(cfg.dataset)
    results = build_results(cfg, spec, questions, rows, RunOutput(questions, answers, 1.0, {}), {"q1", "q2"})
    assert results["failed"] == 1 and results["n"] == 2 and results["metrics"]["em"] == 0.5
    assert [row["error"] for row in rows] == [None, "RuntimeError: boom"]
    log = PredictionLog(tmp_path)
    log.start([])
    for row in rows:
        log.append(row)
    log.finish(rows)
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert read_results(tmp_path)[1][1]["error"] == "RuntimeError: boom"
    assert [row["error"] for row in log.read().rows.values()] == [None, "RuntimeError: boom"]


def test_missing_dataset_path_exits_with_a_clear_message(tmp_path):
    missing = tmp_path / "nowhere" / "questions.jsonl"
    proc = subprocess.run([sys.executable, "-m", "orthrus_rag.cli.run", "dataset=2wiki", f"dataset.path={missing}",
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    assert f"question file not found: {missing}" in proc.stderr and "dataset.path" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_hugging_face_dataset_path_reaches_the_hugging_face_loader(run_app, tiny_models, tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(SystemExit) as exit_info:
        run_app(main, "orthrus-rag", *tiny_models, "dataset.path=hf:no-such-owner/no-such-dataset-orthrus",
                f"hydra.run.dir={tmp_path / 'run'}")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "could not load Hugging Face dataset 'no-such-owner/no-such-dataset-orthrus'" in err
    assert "question file not found" not in err and "Traceback" not in err


def test_relative_2wiki_paths_resolve_from_where_the_command_runs(tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir

    from orthrus_rag.launch import CONF_DIR
    from orthrus_rag.eval.experiment.datasets import DatasetSpec

    monkeypatch.delenv("ORTHRUS_RAG_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["dataset=2wiki", "dataset.split=test", "dataset.limit=200"])
    spec = DatasetSpec.from_config(cfg.dataset)
    assert spec.path == tmp_path.parent / "shared" / "data" / "2wiki" / "questions.jsonl"
    assert spec.corpus.name == "corpus.jsonl" and (spec.split, spec.limit) == ("test", 200)


@pytest.mark.shipped
def test_shipped_models_answer_two_demo_questions(run_app, tmp_path):
    out = tmp_path / "run"
    run_app(main, "orthrus-rag", "pipeline=standard_rag", "dataset.limit=2", f"index.folder={tmp_path / 'index'}",
            f"hydra.run.dir={out}")
    results, rows = read_results(out)
    check_results(results, "standard_rag", 2)
    assert results["metrics"]["recall"] > 0  # MiniLM finds gold passages of the demo questions
    assert all(row["prediction"] for row in rows)


def test_2wiki_experiment_selects_the_reported_setting():
    from hydra import compose, initialize_config_dir

    from orthrus_rag.launch import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+experiment=2wiki_test", "pipeline=standard_rag"])
    assert (cfg.dataset.name, cfg.dataset.split, cfg.dataset.limit) == ("2wiki", "test", 200)
    assert cfg.pipeline.name == "standard_rag"


@pytest.mark.parametrize("allow", [False, True])
def test_failed_questions_make_the_run_fail_unless_allowed(run_app, tiny_models, tmp_path, monkeypatch, capsys, allow):
    from orthrus_rag.pipelines.no_retrieval import NoRetrieval

    real = NoRetrieval.answer

    async def flaky(self, question):
        if question == first_question:
            raise RuntimeError("boom")
        return await real(self, question)

    from orthrus_rag.eval.experiment.datasets import load_questions
    from orthrus_rag.demo import demo_questions_path

    first_question = load_questions(demo_questions_path(), "all", 1)[0].question
    monkeypatch.setattr(NoRetrieval, "answer", flaky)
    args = ["orthrus-rag", *tiny_models, *SMALL, "pipeline=no_retrieval", f"hydra.run.dir={tmp_path / 'run'}"]
    if allow:
        run_app(main, *args, "allow_failures=true")
    else:
        with pytest.raises(SystemExit) as exit_info:
            run_app(main, *args)
        assert exit_info.value.code == 2
        assert "1 of 3 questions failed" in capsys.readouterr().err
    results, rows = read_results(tmp_path / "run")  # the files are written either way
    assert results["failed"] == 1 and rows[0]["error"] == "RuntimeError: boom"
