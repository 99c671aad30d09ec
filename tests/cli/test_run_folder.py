"""A run never deletes a row it did not write: a smaller selection, a rerun without resume, a second process, a full
disk, a finished run resumed. Each is tried as a user would, through `orthrus-rag` on the tiny models."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orthrus_rag.eval.experiment.predictions import PredictionLog
from orthrus_rag.cli.run import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["pipeline=no_retrieval", "pipeline.max_tokens=4", "concurrency=1"]


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]


def ids(folder: Path) -> list[str]:
    return [row["id"] for row in rows(folder)]


def one_line_error(capsys, exit_info) -> str:
    """The error: the last line written to stderr (after any loading messages), the only one of its kind."""
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    last = err.rstrip("\n").split("\n")[-1]
    assert last.startswith("orthrus-rag: error: ") and err.count("orthrus-rag: error: ") == 1
    assert "Traceback" not in err
    return last


@pytest.fixture
def app(run_app, tiny_models, tmp_path):
    """`app(*overrides)`: orthrus-rag on the tiny models into tmp_path/run; the results.json it wrote."""
    folder = tmp_path / "run"

    def run(*extra: str) -> dict:
        run_app(main, "orthrus-rag", *tiny_models, *SMALL, f"hydra.run.dir={folder}", *extra)
        return json.loads((folder / "results.json").read_text())

    return run


def test_a_resume_with_a_smaller_limit_keeps_the_other_answers(app, tmp_path, capsys):
    folder = tmp_path / "run"
    app("dataset.limit=4")
    four = rows(folder)
    capsys.readouterr()
    results = app("dataset.limit=2", "resume=true")
    assert results["n"] == 2 and ids(folder) == [r["id"] for r in four]  # nothing asked, nothing lost
    assert rows(folder) == four
    assert "keeping 2 answers to questions outside this selection" in capsys.readouterr().out
    assert json.loads((folder / "results.json").read_text())["n"] == 2
    results = app("dataset.limit=5", "resume=true")
    assert results["n"] == 5 and rows(folder)[:4] == four and len(rows(folder)) == 5
    assert results["resumed"]["answered_before"] == 4 and results["resumed"]["answered_now"] == 1


def test_the_other_answers_are_on_disk_while_a_smaller_resumed_run_asks(app, tmp_path, monkeypatch):
    """A run killed while it asks again loses no answer it did not write: the rows outside its selection are in the
    log from its start, not only once it ends."""
    folder = tmp_path / "run"
    app("dataset.limit=4")
    four = rows(folder)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in four[1:]), encoding="utf-8")
    on_disk = []
    append = PredictionLog.append
    monkeypatch.setattr(PredictionLog, "append", lambda log, row: (on_disk.append(ids(folder)), append(log, row)))
    app("dataset.limit=2", "resume=true")
    assert on_disk == [[r["id"] for r in four[1:]]]  # asked q0 again with q1, q2 and q3 already kept on disk
    assert sorted(ids(folder)) == sorted(r["id"] for r in four)


def test_a_rerun_without_resume_is_refused_and_overwrite_starts_again(app, tmp_path, capsys):
    folder = tmp_path / "run"
    app("dataset.limit=2")
    before = (folder / "predictions.jsonl").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        app("dataset.limit=2")
    err = one_line_error(capsys, exit_info)
    assert f"{folder} already holds 2 answers" in err and "resume=true" in err and "overwrite=true" in err
    assert (folder / "predictions.jsonl").read_bytes() == before
    with pytest.raises(SystemExit) as exit_info:
        app("dataset.limit=2", "resume=true", "overwrite=true")
    assert "contradict" in one_line_error(capsys, exit_info)
    app("dataset.limit=1", "overwrite=true")
    assert ids(folder) == ["demo-q01"]


def test_a_resumed_finished_run_keeps_its_measured_figures(app, tmp_path, capsys):
    folder = tmp_path / "run"
    first = app("dataset.limit=2")
    capsys.readouterr()
    again = app("dataset.limit=2", "resume=true")
    assert "nothing is asked" in capsys.readouterr().out
    for key in ("qps", "wall_s", "engine", "metrics", "latency"):
        assert again[key] == first[key], key
    assert "resumed" not in again and first["qps"] > 0
    (folder / "results.json").unlink()  # stopped after its last answer, before results.json: figures not recorded
    rebuilt = app("dataset.limit=2", "resume=true")
    assert "no results.json recorded them" in capsys.readouterr().out
    assert rebuilt["qps"] == 0.0 and rebuilt["metrics"] == first["metrics"]
    assert rebuilt["resumed"]["answered_before"] == 2 and rebuilt["resumed"]["answered_now"] == 0


def test_a_torn_multibyte_last_line_is_skipped_with_a_warning(app, tmp_path, capsys):
    folder = tmp_path / "run"
    app("dataset.limit=3")
    full = rows(folder)
    lines = (folder / "predictions.jsonl").read_bytes().splitlines(keepends=True)
    row = json.loads(lines[2])
    row["prediction"] = "Zoë Åström 東京"  # written with ensure_ascii=False: multi-byte UTF-8
    encoded = json.dumps(row, ensure_ascii=False).encode()
    cut = encoded.index("東".encode()) + 1  # inside the three bytes of one character, as a SIGKILL can leave it
    (folder / "predictions.jsonl").write_bytes(b"".join(lines[:2]) + encoded[:cut])
    capsys.readouterr()
    app("dataset.limit=3", "resume=true")
    captured = capsys.readouterr()
    assert f"line 3 of {folder / 'predictions.jsonl'} is cut short (UnicodeDecodeError)" in captured.err
    assert "resuming: 2 of 3" in captured.out
    assert [r["id"] for r in rows(folder)] == [r["id"] for r in full]


def test_a_damaged_line_before_the_last_stops_the_run_and_changes_nothing(app, tmp_path, capsys):
    folder = tmp_path / "run"
    app("dataset.limit=3")
    path = folder / "predictions.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"{not json\n" + b"".join(lines[1:]))
    damaged = path.read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        app("dataset.limit=3", "resume=true")
    assert f"line 2 of {path} is not a prediction row" in one_line_error(capsys, exit_info)
    assert path.read_bytes() == damaged


def test_a_full_disk_stops_the_run_keeps_every_row_and_resume_finishes(app, tmp_path, capsys, monkeypatch):
    from orthrus_rag.eval.experiment.predictions import PredictionLog

    folder = tmp_path / "run"
    real, calls = PredictionLog.append, []

    def append(self, row):
        calls.append(row["id"])
        if len(calls) == 3:
            self._file.write('{"id": "demo-q0')  # part of the line reached the disk, as with ENOSPC mid-write
            self._file.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, row)

    monkeypatch.setattr(PredictionLog, "append", append)
    with pytest.raises(SystemExit) as exit_info:
        app("dataset.limit=5")
    err = one_line_error(capsys, exit_info)
    assert "No space left on device" in err and "the 2 answers written before are kept" in err and "resume=true" in err
    assert list(PredictionLog(folder).read().rows) == calls[:2] and not (folder / "results.json").exists()
    monkeypatch.setattr(PredictionLog, "append", real)
    results = app("dataset.limit=5", "resume=true")
    captured = capsys.readouterr()
    assert "line 3" in captured.err and "cut short" in captured.err and "resuming: 2 of 5" in captured.out
    assert results["n"] == 5 and results["failed"] == 0 and len(rows(folder)) == 5


def test_a_full_disk_at_the_end_keeps_the_log_and_resume_writes_the_results(app, tmp_path, capsys, monkeypatch):
    import orthrus_rag.cli.run as run_module

    folder, real = tmp_path / "run", run_module.write_atomic

    def full_at_results(path, text):
        if Path(path).name == "results.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, text)

    monkeypatch.setattr(run_module, "write_atomic", full_at_results)
    with pytest.raises(SystemExit) as exit_info:
        app("dataset.limit=3")
    err = one_line_error(capsys, exit_info)
    assert f"could not write in {folder}: [Errno 28] No space left on device" in err and "resume=true" in err
    assert sorted(ids(folder)) == ["demo-q01", "demo-q02", "demo-q03"] and not (folder / "results.json").exists()
    monkeypatch.undo()
    results = app("dataset.limit=3", "resume=true")
    assert results["n"] == 3 and (folder / "results.json").exists() and ids(folder) == sorted(ids(folder))


def test_two_runs_started_at_once_in_one_folder(tiny_models, tmp_path):
    folder = tmp_path / "run"
    command = [sys.executable, "-m", "orthrus_rag.cli.run", *tiny_models, *SMALL, "dataset.limit=3",
               f"hydra.run.dir={folder}", "runtime.num_threads=1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [o[1][-800:] for o in outs]
    winner, loser = (0, 1) if procs[0].returncode == 0 else (1, 0)
    err = outs[loser][1]
    # The loser either met the winner's lock or, started late, found the winner's finished answers: both say so.
    busy = f"another process (pid {procs[winner].pid}) is writing to {folder}"
    done = f"{folder} already holds 3 answers"
    assert (busy in err or done in err) and "Traceback" not in err, err
    assert ids(folder) == ["demo-q01", "demo-q02", "demo-q03"]
    assert not list(folder.glob(".*.tmp"))


def test_a_run_into_a_folder_another_process_writes_stops_and_writes_nothing(tiny_models, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]);"
                               "from orthrus_rag.files import folder_lock\n"
                               "with folder_lock(sys.argv[2], '.orthrus-rag.lock'):\n print('held', flush=True); time.sleep(120)",
                               str(ROOT), str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        command = [sys.executable, "-m", "orthrus_rag.cli.run", *tiny_models, *SMALL, "dataset.limit=3",
                   f"hydra.run.dir={folder}", "runtime.num_threads=1"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        holder.kill()
        holder.wait(30)
    assert done.returncode == 2, done.stderr[-800:]
    assert f"another process (pid {holder.pid}) is writing to {folder}" in done.stderr
    assert "Traceback" not in done.stderr and not (folder / "predictions.jsonl").exists()


def test_the_lock_names_its_holder_and_is_gone_with_it(tmp_path):
    from orthrus_rag.files import FolderBusyError, folder_lock

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]);"
                               "from orthrus_rag.files import folder_lock\n"
                               "with folder_lock(sys.argv[2]):\n print('held', flush=True); time.sleep(60)",
                               str(ROOT), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(FolderBusyError, match=f"pid {holder.pid}"):
        with folder_lock(tmp_path):
            pass
    holder.kill()  # however its holder ends, the kernel releases the lock
    holder.wait(30)
    deadline = time.monotonic() + 10
    with folder_lock(tmp_path):
        assert time.monotonic() < deadline
