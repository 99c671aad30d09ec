"""The indexing benchmark on the tiny model: both runs see the same tokens, bench.json layout, the command."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orthrus_rag.eval.bench.indexing import format_indexing_table, summarise

ROOT = Path(__file__).resolve().parents[2]


def test_summary_takes_medians():
    rounds = [{"index": {"tok_s": t_i, "steps": 1}, "prefill": {"tok_s": t_p, "steps": 1}}
              for t_i, t_p in [(80.0, 100.0), (90.0, 120.0), (70.0, 110.0)]]
    assert summarise(rounds) == {"index_tok_s": 80.0, "prefill_tok_s": 110.0, "index/prefill": round(80 / 110, 3)}
    assert "| median | 80 | 110 | 0.73 |" in format_indexing_table({"rounds": rounds, "median": summarise(rounds)})


@pytest.mark.parametrize("cut", [None, 6])
def test_indexing_through_the_bench_command(tiny_llama_dir, tmp_path, cut):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": f"Title {i}", "text": "word " * (5 + 7 * i)}) + "\n"
                              for i in range(12)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "orthrus_rag.eval.bench.cli", "workload=indexing", "embedder=backbone_raw",
                           f"model.name={tiny_llama_dir}", "runtime.dtype=float32", f"corpus={corpus}",
                           "workload.passages=10", "workload.rounds=2", "index.batch_size=4",
                           f"embedder.passage_max_tokens={cut or 'null'}", f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    bench = json.loads((tmp_path / "run" / "bench.json").read_text())
    assert bench["workload"] == "indexing" and len(bench["rounds"]) == 2
    for r in bench["rounds"]:
        assert r["index"]["tokens"] == r["prefill"]["tokens"] > 10 * 5  # the same ten texts, token for token
        assert cut is None or r["index"]["tokens"] == 10 * cut  # every passage is longer than the cut
        assert r["index"]["tok_s"] > 0 and r["prefill"]["tok_s"] > 0
    assert set(bench["median"]) == {"index_tok_s", "prefill_tok_s", "index/prefill"}
    assert "| median |" in done.stdout


def test_bad_settings_are_one_line_errors(tiny_llama_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "orthrus_rag.eval.bench.cli", "workload=indexing", f"model.name={tiny_llama_dir}",
                           "workload.rounds=0", f"hydra.run.dir={tmp_path}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "workload.passages, workload.rounds and index.batch_size must be >= 1" in done.stderr
