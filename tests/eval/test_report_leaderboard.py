"""LEADERBOARD.md from existing results.json files, and the row configs."""
import json

import pytest

from eval.leaderboard import main, row_names


def results(pipeline: str, acc: float, f1: float) -> dict:
    return {"pipeline": pipeline, "dataset": "2wiki", "split": "test", "n": 100,
            "metrics": {"em": 0.05, "f1": f1, "acc": acc, "recall": 0.6325, "all_gold": 0.3},
            "latency": {"mean_s": 1.0, "p50_s": 1.0, "p90_s": 2.0, "p99_s": 12.34}, "qps": 0.5,
            "config": {"pipeline": {"name": pipeline, "k": 5}, "model": {"name": "gen"}, "embedder": {"name": None},
                       "dataset": {"split": "test", "limit": 100}, "runtime": {"policy": "adaptive"},
                       "concurrency": 16}}


def test_from_results(tmp_path):
    for i, (name, acc, f1) in enumerate([("standard_rag", 0.09, 0.1), ("ircot", 0.11, 0.1), ("iter", 0.09, 0.2)]):
        (tmp_path / f"{i}-{name}").mkdir()
        (tmp_path / f"{i}-{name}" / "results.json").write_text(json.dumps(results(name, acc, f1)))
    out = tmp_path / "LEADERBOARD.md"
    main(["--from-results", str(tmp_path), "--out", str(out)])
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split(" | ")[1] for r in rows] == ["ircot", "iter", "standard_rag"]  # Acc, then F1
    cells = rows[0].strip("| ").split(" | ")
    assert cells[3:10] == ["100", "0.050", "0.100", "0.110", "0.632", "12.3", "0.500"]
    assert cells[10] == "k=5; gen + backbone; split=test limit=100; concurrency=16 policy=adaptive"
    assert f"--from-results {tmp_path}" in out.read_text()


def test_rows_and_errors(tmp_path):
    assert {"no_retrieval", "standard_rag", "ircot", "iter_retgen"} <= set(row_names())
    with pytest.raises(ValueError, match="nope"):
        row_names(["nope"])
    with pytest.raises(SystemExit):
        main(["--from-results", str(tmp_path), "--out", str(tmp_path / "x.md")])  # no results.json there


def test_row_configs_compose():
    from hydra import compose, initialize_config_dir

    from orthrus_rag.cli.common import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        for name in row_names():
            cfg = compose("config", overrides=[f"+experiment=leaderboard/{name}"])
            assert name.startswith(cfg.pipeline.name) and cfg.dataset.name == "2wiki" and cfg.dataset.split == "test"
