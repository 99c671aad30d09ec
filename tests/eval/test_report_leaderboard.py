"""LEADERBOARD.md from results files (byte for byte reproducible), the header facts, and the row configs."""
import json
import sys
from pathlib import Path

import pytest

import orthrus_rag.eval.leaderboard as leaderboard
from orthrus_rag.eval.leaderboard import BOARDS, main, row_names

ROOT = Path(__file__).resolve().parents[2]


def results(pipeline: str, acc: float, f1: float) -> dict:
    return {"pipeline": pipeline, "dataset": "2wiki", "split": "test", "n": 100,
            "metrics": {"em": 0.05, "f1": f1, "acc": acc, "recall": 0.6325, "all_gold": 0.3},
            "latency": {"mean_s": 1.0, "p50_s": 1.0, "p90_s": 2.0, "p99_s": 12.34}, "qps": 0.5,
            "config": {"pipeline": {"name": pipeline, "k": 5}, "model": {"name": "gen"}, "embedder": {"name": None},
                       "dataset": {"split": "test", "limit": 100}, "runtime": {"policy": "adaptive"},
                       "concurrency": 16}}


def full_results(pipeline: str, acc: float, end: str, wall_s: float = 100.0, cpu: str = "Xeon X") -> dict:
    """A results.json as runs write it now: intervals, run and data facts."""
    r = results(pipeline, acc, 0.2)
    r["metrics"]["acc_substring"] = acc + 0.01
    r["ci"] = {"level": 0.95, "resamples": 1000, "seed": 0,
               "bounds": {"em": [0.01, 0.1], "f1": [0.15, 0.25], "acc": [acc - 0.05, acc + 0.05],
                          "acc_substring": [acc - 0.04, acc + 0.06], "recall": [0.6, 0.66], "all_gold": [0.2, 0.4]}}
    r["config"].update(index={"factory": "Flat"}, model={"name": "smollm2-135m-instruct"},
                       embedder={"name": "all-minilm-l6-v2"},
                       runtime={"dtype": "bfloat16", "device": "cpu", "num_threads": 1, "policy": "adaptive",
                                "max_num_batched_tokens": 512})
    r["wall_s"] = wall_s
    r["run"] = {"date": end, "python": "3.11.9", "torch": "2.13.0", "transformers": "5.24.0",
                "git_commit": "0123456789abcdef", "git_dirty": False,
                "machine": {"cpu": cpu, "cores": 2, "cores_usable": 2, "gpu": None, "load_avg": [1.5, 1.2, 1.0]}}
    r["data"] = {"questions": {"file": "questions.jsonl", "split": "test", "answered": 100, "split_size": 700,
                               "total": 1000},
                 "corpus": {"file": "corpus.jsonl", "passages": 6119, "fingerprint": "abc123"}}
    return r


def write_rows(folder: Path, rows: dict[str, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, r in rows.items():
        (folder / f"{name}.json").write_text(json.dumps(r))
    return folder


def table_rows(text: str) -> list[list[str]]:
    return [line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]


def test_from_results(tmp_path):
    for i, (name, acc, f1) in enumerate([("standard_rag", 0.09, 0.1), ("ircot", 0.11, 0.1), ("iter", 0.09, 0.2)]):
        (tmp_path / f"{i}-{name}").mkdir()
        (tmp_path / f"{i}-{name}" / "results.json").write_text(json.dumps(results(name, acc, f1)))
    out = tmp_path / "LEADERBOARD.md"
    main(["--from-results", str(tmp_path), "--out", str(out)])
    rows = table_rows(out.read_text())
    assert [r[1] for r in rows] == ["ircot", "iter", "standard_rag"]  # Acc, then F1
    # results written before intervals and acc_substring existed: plain values and "-"
    assert rows[0][3:12] == ["100", "0.050", "0.100", "0.110", "-", "0.632", "0.300", "12.3", "0.500"]
    assert rows[0][12] == "k=5; gen + backbone; split=test limit=100; concurrency=16 policy=adaptive"
    assert "- Machine: not recorded" in out.read_text()


def test_a_row_run_over_ray_workers_says_so(tmp_path):
    r = full_results("ircot", 0.1, "2026-12-01T00:00:00")
    r["config"]["workers"] = 3
    assert leaderboard.config_text(r["config"]).endswith("concurrency=16 policy=adaptive workers=3")
    assert leaderboard.runtime_fact(r).endswith("concurrency 16 workers 3")


def test_workers_reach_every_row_run(tmp_path, monkeypatch, capsys):
    from hydra import compose, initialize_config_dir

    from orthrus_rag.launch import CONF_DIR

    calls = []
    monkeypatch.setattr(leaderboard.subprocess, "run",
                        lambda args, **kw: calls.append(args) or type("Done", (), {"returncode": 1})())
    with pytest.raises(SystemExit):
        main(["--rows", "ircot", "--runs", str(tmp_path), "--out", str(tmp_path / "x.md"), "workers=2"])
    assert calls[0][-1] == "workers=2" and "+experiment=leaderboard/ircot" in calls[0]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        assert compose("config", overrides=["+experiment=leaderboard/ircot", "workers=2"]).workers == 2


def test_rebuild_is_byte_for_byte_and_reads_the_header_from_the_runs(tmp_path):
    folder = write_rows(tmp_path / "results", {
        "ircot": full_results("ircot", 0.2, "2026-12-01T10:00:00+00:00"),
        "standard_rag": full_results("standard_rag", 0.1, "2026-12-01T12:00:00+00:00")})
    first, second = tmp_path / "a.md", tmp_path / "b.md"
    main(["--from-results", str(folder), "--out", str(first)])
    main(["--from-results", str(folder), "--out", str(second)])
    text = first.read_text()
    assert first.read_bytes() == second.read_bytes()
    assert table_rows(text)[0][4:10] == ["0.050 [0.010, 0.100]", "0.200 [0.150, 0.250]", "0.200 [0.150, 0.250]",
                                         "0.210 [0.160, 0.260]", "0.632 [0.600, 0.660]", "0.300 [0.200, 0.400]"]
    for fact in ["- Models: generator `smollm2-135m-instruct`, embedder `all-minilm-l6-v2`",
                 "- Runtime: dtype bfloat16, device cpu, torch threads 1, policy adaptive, max_num_batched_tokens 512, "
                 "concurrency 16", "- Index: FAISS `Flat`, dense retrieval",
                 "- Corpus: `corpus.jsonl`, 6,119 passages (fingerprint abc123)",
                 "- Questions: 2wiki test split: the first 100 of 700 questions (1,000 in `questions.jsonl`)",
                 "- Machine: Xeon X, 2 cores", "- Software: torch 2.13.0, transformers 5.24.0, Python 3.11.9",
                 "- Commit: `0123456789`", "- Date (UTC): 2026-12-01",
                 "- Timing: rows ran one at a time (no two rows' answering overlapped); 1-minute load average at "
                 "the end of each run 1.50 to 1.50"]:
        assert fact in text, fact
    assert str(tmp_path) not in text  # nothing depends on where the files were read from


def test_acc_by_question_type_follows_the_main_table(tmp_path):
    low = full_results("standard_rag", 0.1, "2026-12-01T10:00:00+00:00")
    high = full_results("ircot", 0.2, "2026-12-01T12:00:00+00:00")
    low["by_type"] = {"comparison": {"n": 3, "acc": 0.125}, "inference": {"n": 2, "acc": 0.5}}
    high["by_type"] = {"comparison": {"n": 3, "acc": 1 / 3}}
    out = tmp_path / "LEADERBOARD.md"
    main(["--from-results", str(write_rows(tmp_path / "results", {"a": low, "b": high})), "--out", str(out)])
    section = out.read_text().split("## Acc by question type")[1]
    assert "| # | pipeline | comparison (n=3) | inference (n=2) |" in section
    assert "| 1 | ircot | 0.333 | - |" in section and "| 2 | standard_rag | 0.125 | 0.500 |" in section


def test_no_type_table_without_types(tmp_path):
    out = tmp_path / "LEADERBOARD.md"
    main(["--from-results", str(write_rows(tmp_path / "results", {"a": results("x", 0.1, 0.1)})), "--out", str(out)])
    assert "question type" not in out.read_text()


def test_header_names_differences_and_overlapping_runs(tmp_path):
    folder = write_rows(tmp_path, {
        "a": full_results("ircot", 0.3, "2026-12-01T10:00:00+00:00", wall_s=600),
        "b": full_results("iter_retgen", 0.2, "2026-12-01T10:05:00+00:00", wall_s=600, cpu="EPYC Y"),
        "c": full_results("no_retrieval", 0.1, "2026-12-02T10:00:00+00:00", cpu="EPYC Y")})
    hybrid = json.loads((folder / "a.json").read_text())
    hybrid["config"]["index"].update(retrieval="hybrid", rrf_k=60, candidates=15)
    (folder / "a.json").write_text(json.dumps(hybrid))
    main(["--from-results", str(folder), "--out", str(tmp_path / "L.md")])
    text = (tmp_path / "L.md").read_text()
    assert ("- Index: FAISS `Flat`, hybrid retrieval (rrf_k 60, 15 candidates a side) (row 1); "
            "FAISS `Flat`, dense retrieval (rows 2, 3)") in text
    assert "- Machine: Xeon X, 2 cores (row 1); EPYC Y, 2 cores (rows 2, 3)" in text
    assert "- Date (UTC): 2026-12-01 (rows 1, 2); 2026-12-02 (row 3)" in text
    assert "- Timing: rows ran side by side (rows 1 and 2 overlapped)" in text


def fake_experiment(rows: dict[str, dict]):
    """Stands in for `python -m orthrus_rag.cli.run`: writes the row's results.json into its hydra.run.dir."""
    calls = []

    def run(args, **kwargs):
        calls.append(args)
        assert args[:3] == [sys.executable, "-m", "orthrus_rag.cli.run"]
        name = args[3].rsplit("/", 1)[1]
        run_dir = Path(args[4].removeprefix("hydra.run.dir="))
        run_dir.mkdir(parents=True)
        (run_dir / "results.json").write_text(json.dumps(dict(rows[name], predictions=["raw"])))
        return type("Done", (), {"returncode": 0})()

    return run, calls


def test_running_the_rows_saves_them_and_rebuilds_the_same_bytes(tmp_path, monkeypatch):
    rows = {"ircot": full_results("ircot", 0.2, "2026-12-01T10:00:00+00:00"),
            "standard_rag": full_results("standard_rag", 0.1, "2026-12-01T12:00:00+00:00")}
    run, calls = fake_experiment(rows)
    monkeypatch.setattr(leaderboard.subprocess, "run", run)
    saved, out = tmp_path / "results", tmp_path / "LEADERBOARD.md"
    main(["--rows", "ircot,standard_rag", "--runs", str(tmp_path / "runs"), "--results", str(saved),
          "--out", str(out), "dataset.limit=5"])
    assert [c[3] for c in calls] == ["+experiment=leaderboard/ircot", "+experiment=leaderboard/standard_rag"]
    assert calls[0][-1] == "dataset.limit=5"
    assert sorted(p.name for p in saved.iterdir()) == ["ircot.json", "standard_rag.json"]
    assert json.loads((saved / "ircot.json").read_text()) == rows["ircot"]  # the raw predictions are dropped
    main(["--from-results", str(saved), "--out", str(tmp_path / "again.md")])
    assert out.read_bytes() == (tmp_path / "again.md").read_bytes()


def test_the_qwen_board_runs_its_own_rows_and_says_how_to_rebuild_it(tmp_path, monkeypatch):
    run, calls = fake_experiment({"ircot": full_results("ircot", 0.3, "2026-12-01T10:00:00+00:00")})
    monkeypatch.setattr(leaderboard.subprocess, "run", run)
    out = tmp_path / "board.md"
    main(["--board", "qwen05", "--rows", "ircot", "--runs", str(tmp_path / "runs"), "--results",
          str(tmp_path / "results"), "--out", str(out)])
    assert [c[3] for c in calls] == ["+experiment=leaderboard_qwen05/ircot"]
    text = out.read_text()
    assert "`conf/experiment/leaderboard_qwen05/`" in text
    assert "`python -m orthrus_rag.eval.leaderboard --board qwen05 --from-results leaderboard/results_qwen05`" in text


@pytest.mark.parametrize("board", BOARDS.values(), ids=BOARDS)
def test_committed_results_rebuild_the_committed_leaderboard(tmp_path, board):
    if not (ROOT / board.results).is_dir():
        pytest.skip(f"no committed results for the {board.name} board")
    committed = {p.stem for p in (ROOT / board.results).glob("*.json")}
    assert committed <= set(row_names(board=board)) and committed
    if board.name == "smollm2":
        assert committed == set(row_names())
    main(["--board", board.name, "--from-results", str(ROOT / board.results), "--out", str(tmp_path / "board.md")])
    assert (tmp_path / "board.md").read_bytes() == (ROOT / board.out).read_bytes()


def test_rows_and_errors(tmp_path, capsys):
    assert {"no_retrieval", "standard_rag", "ircot", "iter_retgen"} <= set(row_names())
    assert "_pinned" not in row_names()
    with pytest.raises(ValueError, match="nope"):
        row_names(["nope"])
    with pytest.raises(SystemExit):
        main(["--from-results", str(tmp_path), "--out", str(tmp_path / "x.md")])  # no results.json there
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(SystemExit):
        main(["--from-results", str(tmp_path), "--out", str(tmp_path / "x.md")])
    assert "broken.json is not valid JSON" in capsys.readouterr().err


def test_a_failed_row_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(leaderboard.subprocess, "run", lambda args, **kw: type("Done", (), {"returncode": 1})())
    with pytest.raises(SystemExit):
        main(["--rows", "ircot", "--runs", str(tmp_path), "--results", str(tmp_path / "r"), "--out",
              str(tmp_path / "x.md")])
    assert "row 'ircot' failed" in capsys.readouterr().err


def test_row_configs_compose_and_pin_what_changes_a_number():
    from hydra import compose, initialize_config_dir

    from orthrus_rag.launch import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        for name in row_names():
            cfg = compose("config", overrides=[f"+experiment=leaderboard/{name}"])
            assert name.startswith(cfg.pipeline.name) and cfg.dataset.name == "2wiki" and cfg.dataset.split == "test"
            assert (cfg.dataset.limit, cfg.workers, cfg.concurrency, cfg.index.factory) == (200, 2, 8, "Flat")
            assert (cfg.runtime.dtype, cfg.runtime.device, cfg.runtime.num_threads) == ("float32", "cpu", 1)
            assert (cfg.model.name, cfg.embedder.name) == ("smollm2-135m-instruct", "all-minilm-l6-v2")
            assert (cfg.metrics.bootstrap_seed, cfg.metrics.bootstrap_resamples) == (0, 1000)


def test_a_row_with_failed_questions_is_not_published(tmp_path, monkeypatch, capsys):
    rows = {"ircot": dict(full_results("ircot", 0.2, "2026-12-01T10:00:00+00:00"), failed=3)}
    run, _ = fake_experiment(rows)
    monkeypatch.setattr(leaderboard.subprocess, "run", run)
    with pytest.raises(SystemExit):
        main(["--rows", "ircot", "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "r"), "--out",
              str(tmp_path / "x.md")])
    assert "3 of" in capsys.readouterr().err and not (tmp_path / "r").exists() and not (tmp_path / "x.md").exists()
    write_rows(tmp_path / "committed", rows)  # nor from results already on disk
    with pytest.raises(SystemExit):
        main(["--from-results", str(tmp_path / "committed"), "--out", str(tmp_path / "x.md")])
    assert "resume=true" in capsys.readouterr().err
