"""Experiments lose nothing: a run killed half way (SIGKILL) and rerun with resume=true ends with the same
predictions and answer metrics as a run that was never interrupted; a resume with other settings is refused."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ["pipeline=ircot", "pipeline.max_tokens=8", "pipeline.num_demos=0", "pipeline.reader_num_demos=0",
            "pipeline.max_steps=2", "concurrency=2", "runtime.num_threads=1"]
SAME = ("id", "prediction", "passages", "scores", "calls", "error")


def command(tiny_models: list[str], run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "orthrus_rag.cli.run", *tiny_models, *SETTINGS, f"hydra.run.dir={run_dir}", *extra]


def env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "predictions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_killed_run_resumes_to_the_same_files(tiny_models, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    done = subprocess.run(command(tiny_models, full), cwd=ROOT, env=env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    want = rows(full)
    half = len(want) // 2

    proc = subprocess.Popen(command(tiny_models, part), cwd=ROOT, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while len(rows(part)) < half and proc.poll() is None:
        assert time.monotonic() < deadline, "the run never got half way"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    kept = len(rows(part))
    assert half <= kept < len(want), "the run was not killed half way"
    assert not (part / "results.json").exists()

    resumed = subprocess.run(command(tiny_models, part, "resume=true"), cwd=ROOT, env=env(), capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming: {kept} of {len(want)}" in resumed.stdout
    got = rows(part)
    assert [{k: r[k] for k in SAME} for r in got] == [{k: r[k] for k in SAME} for r in want]
    results, reference = (json.loads((d / "results.json").read_text()) for d in (part, full))
    assert results["metrics"] == reference["metrics"] and results["ci"] == reference["ci"]
    assert results["resumed"]["answered_before"] == kept and results["resumed"]["answered_now"] == len(want) - kept
    assert results["n"] == reference["n"] and results["failed"] == 0


def test_resuming_with_other_settings_is_refused(run_app, tiny_models, tmp_path, capsys):
    from orthrus_rag.cli.run import main

    out = tmp_path / "run"
    small = [*tiny_models, "pipeline=no_retrieval", "pipeline.max_tokens=4", "dataset.limit=2", f"hydra.run.dir={out}"]
    run_app(main, "orthrus-rag", *small)
    saved = json.loads((out / "settings.json").read_text())
    assert saved["pipeline"]["max_tokens"] == 4 and "limit" not in saved["dataset"]
    assert not {"resume", "concurrency", "workers", "allow_failures", "hydra"} & set(saved)
    before = rows(out)
    capsys.readouterr()

    with pytest.raises(SystemExit) as exit_info:
        run_app(main, "orthrus-rag", *small, "resume=true", "pipeline.max_tokens=5", "runtime.max_num_seqs=8")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"orthrus-rag: error: resume=true: the answers in {out} were made with other settings: "
                          "pipeline.max_tokens (4 then, 5 now); runtime.max_num_seqs (") and err.count("\n") == 1
    assert "hydra.run.dir" in err and rows(out) == before  # nothing asked, nothing written

    run_app(main, "orthrus-rag", *small, "resume=true", "concurrency=1", "dataset.limit=3", "+metrics.bootstrap_seed=1")
    assert "resuming: 2 of 3" in capsys.readouterr().out and rows(out)[:2] == before and len(rows(out)) == 3

    (out / "settings.json").unlink()  # answers whose settings are unknown: refused unless resume=force
    with pytest.raises(SystemExit):
        run_app(main, "orthrus-rag", *small, "resume=true", "pipeline.max_tokens=5")
    err = capsys.readouterr().err
    assert "holds answers but no settings.json" in err and "resume=force" in err and err.count("\n") == 1
    assert not (out / "settings.json").exists() and rows(out)[:2] == before
    run_app(main, "orthrus-rag", *small, "resume=force", "pipeline.max_tokens=5")
    assert "resuming: all 2 questions already answered" in capsys.readouterr().out
    assert json.loads((out / "settings.json").read_text())["pipeline"]["max_tokens"] == 5


def test_where_the_models_run_is_no_answer_setting():
    from hydra import compose, initialize_config_dir

    from orthrus_rag.cli.run import answer_settings
    from orthrus_rag.launch import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["model.endpoint=http://127.0.0.1:1/v1", "embedder.retries=5"])
    settings = answer_settings(cfg)
    assert settings["model"] == {"name": "smollm2-135m-instruct"}
    assert not {"endpoint", "retries", "timeout_s", "api_key_env"} & settings["embedder"].keys()
