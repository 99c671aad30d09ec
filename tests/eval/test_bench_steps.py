"""The step micro-benchmark on the tiny model: bench.json layout and the Hydra config."""
import json

import pytest

from orthrus_rag.engine import EngineConfig
from orthrus_rag.engine.block_manager import BlockManager
from orthrus_rag.eval.bench.steps import (StepShape, StepsWorkload, build_chunks, format_steps_table, hf_forward,
                                          run_steps)
from orthrus_rag.settings import UserError

SHAPES = {"decode8", "decode64", "decode8_prefill256", "decode8_embed8x32"}


def workload_from_conf(overrides=()) -> StepsWorkload:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from orthrus_rag.launch import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("bench", overrides=["workload=steps", *overrides])
    return StepsWorkload.from_dict(OmegaConf.to_container(cfg.workload, resolve=True))


def test_steps_layout_on_tiny_model(tiny_llama_dir):
    workload = workload_from_conf(["workload.warmup=0", "workload.repeats=1"])
    assert set(workload.shapes) == SHAPES and workload.threads == [1, 2]
    config = EngineConfig(generator=str(tiny_llama_dir), embedder="ignored", dtype="float32")
    bench = json.loads(json.dumps(run_steps(config, workload)))  # what bench.json holds
    assert bench["workload"] == "steps" and set(bench["steps"]) == SHAPES
    for shape, by_threads in bench["steps"].items():
        assert set(by_threads) == {"1", "2"}, shape
        for r in by_threads.values():
            assert set(r) == {"engine_ms", "hf_ms", "hf_cached_ms", "attention_share", "host_ms", "floor_ms"}
            assert all(v > 0 for v in r.values()) and r["attention_share"] < 1
    assert bench["tokens"] == {"decode8": 8, "decode64": 64, "decode8_prefill256": 264, "decode8_embed8x32": 264}
    assert "decode8_embed8x32" in format_steps_table(bench)


def test_shapes_build_the_rows_they_name():
    chunks = build_chunks(StepShape(decodes=3, prefill=10, embeds=2, embed_tokens=5), context=20,
                          blocks=BlockManager(64, 4), vocab=100, seed=0)
    kinds = [(c.seq.kind, c.num_tokens, c.seq.num_computed, bool(c.seq.block_table)) for c in chunks]
    assert kinds == [("generate", 1, 20, True)] * 3 + [("generate", 10, 0, True)] + [("embed", 5, 0, False)] * 2
    tables = [b for c in chunks for b in c.seq.block_table]
    assert len(tables) == len(set(tables))  # no two sequences share a block
    assert all(len(c.seq.block_table) == -(-(c.seq.num_computed + c.num_tokens) // 4) for c in chunks[:4])
    assert all(c.completes for c in chunks)
    with pytest.raises(UserError, match="more KV blocks than the pool's 10"):
        build_chunks(StepShape(decodes=3), context=20, blocks=BlockManager(10, 4), vocab=100, seed=0)


def test_hf_forward_computes_logits_for_the_rows_the_engine_samples(tiny_llama_dir):
    import torch

    from orthrus_rag.models import load_generator

    model, _ = load_generator(str(tiny_llama_dir), torch.float32, "cpu")
    for shape, rows in [(StepShape(decodes=5), 5), (StepShape(decodes=3, prefill=10), 4),
                        (StepShape(embeds=2, embed_tokens=4), 1)]:
        logits = hf_forward(model, shape, model.config.vocab_size, torch.device("cpu"))().logits
        assert logits.shape[:2] == (1, rows), shape


def test_shapes_with_their_own_contexts():
    shape = StepShape(decodes=2, prefill=6, prefill_context=9, context=13)
    chunks = build_chunks(shape, context=20, blocks=BlockManager(64, 4), vocab=100, seed=0)
    kinds = [(c.num_tokens, c.seq.num_computed, len(c.seq.token_ids)) for c in chunks]
    assert kinds == [(1, 13, 14), (1, 13, 14), (6, 9, 15)]
    assert all(c.completes for c in chunks) and shape.num_tokens == 8


def test_long_steps_profile_on_tiny_model(tiny_llama_dir):
    workload = workload_from_conf(["workload=steps_long", "workload.warmup=0", "workload.repeats=1",
                                   "workload.context=40", "workload.shapes.prefill231.prefill_context=30",
                                   "workload.shapes.decode6_prefill231.prefill_context=30"])
    assert workload.profile and workload.threads == [2]
    config = EngineConfig(generator=str(tiny_llama_dir), embedder="ignored", dtype="float32")
    bench = json.loads(json.dumps(run_steps(config, workload)))
    for shape, by_threads in bench["steps"].items():
        profile = by_threads["2"]["profile"]
        assert 0 < len(profile) <= 5 and all(ms >= 0 for ms in profile.values()), shape
        assert any("attention" in op or "mm" in op for op in profile), profile


def test_steps_through_the_bench_command(tiny_llama_dir, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "orthrus_rag.eval.bench.cli", "workload=steps", f"model.name={tiny_llama_dir}",
                           "runtime.dtype=float32", "workload.warmup=0", "workload.repeats=1", "workload.threads=[1]",
                           f"hydra.run.dir={tmp_path}"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert set(bench["steps"]) == SHAPES and all(set(r) == {"1"} for r in bench["steps"].values())


@pytest.mark.parametrize("override, key", [("workload.repeats=abc", "workload.repeats"),
                                           ("workload.threads=[0]", "workload.threads"),
                                           ("+workload.shapes.decode8.decode=3", "workload.shapes.decode8"),
                                           ("+workload.repeat=3", "workload.repeat")])
def test_bad_settings_are_user_errors_naming_the_key(override, key):
    with pytest.raises(UserError, match=key):
        workload_from_conf([override])


def test_host_ms_is_the_step_outside_the_forward():
    import time

    import torch

    from orthrus_rag.eval.bench.steps import host_ms

    class Slow(torch.nn.Module):
        def forward(self):
            time.sleep(0.05)

    model = Slow()

    def step():
        time.sleep(0.01)
        model()

    assert 8 <= host_ms(step, model, 3, torch.device("cpu")) < 30
    assert not model._forward_hooks and not model._forward_pre_hooks  # the hooks are gone after
