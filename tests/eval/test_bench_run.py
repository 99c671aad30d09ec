"""The bench end to end on the tiny random models (hetero, alternating, hf; isolated spawns two processes and is
left to real runs), and the Hydra config it is driven by."""
import json

import pytest

from orthrus_rag.eval.bench.runner import DEFAULT_MODES, Phase, Workload, format_table, run_bench
from orthrus_rag.engine import EngineConfig, PoolingParams

MODE_KEYS = {"rps", "embed_rps", "gen_rps", "p50_s", "p99_s", "mean_s", "requests", "wall_s", "engine", "mode"}


def tiny(generator, embedder=None) -> EngineConfig:
    return EngineConfig(generator=str(generator), embedder=str(embedder) if embedder else None, dtype="float32",
                        max_num_batched_tokens=64, block_size=4, num_kv_blocks=256)


def small_workload(**overrides) -> Workload:
    args = dict(clients=3, requests=8, gen_prompt_tokens=10, embed_tokens=6, max_tokens=3, warmup_requests=2)
    args.update(overrides)
    return Workload(**args)


def test_mixed_colocated_embedder(tiny_llama_dir, tiny_encoder_dir):
    bench = run_bench(tiny(tiny_llama_dir, tiny_encoder_dir), PoolingParams(), small_workload(),
                      ["hetero", "alternating", "hf"])
    bench = json.loads(json.dumps(bench))  # what bench.json holds
    assert bench["workload"] == "mixed" and set(bench["modes"]) == {"hetero", "alternating", "hf"}
    for mode, r in bench["modes"].items():
        assert set(r) == MODE_KEYS, mode
        assert r["requests"] == 8
        assert r["embed_rps"] * r["wall_s"] == pytest.approx(4) and r["gen_rps"] * r["wall_s"] == pytest.approx(4)
        assert r["rps"] == pytest.approx(r["embed_rps"] + r["gen_rps"])
        for kind in ("embed", "generate"):
            assert 0 < r["p50_s"][kind] <= r["p99_s"][kind] <= r["wall_s"]
    modes = bench["modes"]
    rps = {mode: r["rps"] for mode, r in modes.items()}
    assert bench["ratios"] == {"hetero/isolated": None,
                               "hetero/alternating": pytest.approx(rps["hetero"] / rps["alternating"]),
                               "hetero/hf": pytest.approx(rps["hetero"] / rps["hf"]),
                               "hetero/vllm": None, "hetero/vllm_shared": None}
    for mode in ("hetero", "alternating"):  # counters cover the timed requests only: 4 generates x 2 decodes
        engine = modes[mode]["engine"]
        assert engine["tokens"]["decode"] == 4 * 2 and engine["tokens"]["embed"] > 0
    assert modes["alternating"]["engine"]["mixed_steps"] == 0
    assert modes["alternating"]["engine"]["policy"] == "alternating"
    assert modes["hetero"]["engine"]["policy"] == "adaptive"
    assert bench["config"]["threads"]["hetero"] >= 1 and bench["run"]["machine"]["cores_usable"] >= 1
    assert "hetero/alternating" in format_table(bench)


def test_phases_backbone_layout(tiny_llama_dir):
    phases = [Phase("9:1", 0.1), Phase("1:9", 0.9)]
    bench = run_bench(tiny(tiny_llama_dir), PoolingParams(model="backbone"),
                      small_workload(name="phases", requests=10, phases=phases), ["hetero", "alternating"])
    assert list(bench["phases"]) == ["9:1", "1:9"]
    for name, embeds in (("9:1", 1), ("1:9", 9)):
        phase = bench["phases"][name]
        for r in phase["modes"].values():
            assert r["requests"] == 10 and r["embed_rps"] * r["wall_s"] == pytest.approx(embeds)
        assert phase["ratios"]["hetero/alternating"] == pytest.approx(
            phase["modes"]["hetero"]["rps"] / phase["modes"]["alternating"]["rps"])
    total = bench["modes"]["hetero"]
    assert total["requests"] == 20
    assert total["wall_s"] == pytest.approx(sum(p["modes"]["hetero"]["wall_s"] for p in bench["phases"].values()))
    assert set(total["engine"]) == {"9:1", "1:9"}  # counters kept per phase
    assert "phase 1:9" in format_table(bench)


def test_unknown_mode_rejected(tiny_llama_dir):
    with pytest.raises(ValueError, match="unknown mode"):
        run_bench(tiny(tiny_llama_dir), PoolingParams(model="backbone"), small_workload(), ["gpu"])


def test_config_composes():
    from hydra import compose, initialize_config_dir

    from orthrus_rag.eval.bench.cli import workload_from_config
    from orthrus_rag.launch import CONF_DIR, UserError
    from orthrus_rag.stack import StackPlan

    def engine_config(cfg):
        return StackPlan.from_config(cfg, pipelines={}).engine

    def pooling_params(cfg):
        return StackPlan.from_config(cfg, pipelines={}).embedding.params

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        mixed = compose("bench")
        phases = compose("bench", overrides=["workload=phases", "embedder=backbone", "modes=[hetero,gpu]"])
    assert list(mixed.modes) == list(DEFAULT_MODES)
    workload = workload_from_config(mixed)
    assert workload.name == "mixed" and workload.clients == 8 and [p.embed_share for p in workload.phases] == [0.5]
    assert engine_config(mixed).embedder and pooling_params(mixed).model is None
    assert engine_config(phases).embedder is None and pooling_params(phases).model == "backbone"
    with pytest.raises(UserError, match="gpu"):
        workload_from_config(phases)
    phases.modes = ["hetero"]
    assert [(p.name, p.embed_share) for p in workload_from_config(phases).phases] == [("9:1", 0.1), ("1:1", 0.5),
                                                                                        ("1:9", 0.9)]


def test_mode_threads_split_the_cores_only_for_isolated(monkeypatch):
    from orthrus_rag.eval.bench import runner

    monkeypatch.setattr(runner, "usable_cores", lambda: 6)
    unset, four, one = (EngineConfig(generator="g", embedder=None, num_threads=n) for n in (None, 4, 1))
    assert [runner.mode_threads(unset, m) for m in runner.MODES] == [6, 3, 6, 6, 3, 6]  # hetero, isolated, ..., vllm_shared
    assert runner.mode_threads(four, "isolated") == 2 and runner.mode_threads(four, "hf") == 4
    assert runner.mode_threads(one, "isolated") == 1


@pytest.mark.parametrize("override, key", [("workload.requests=abc", "workload.requests"),
                                           ("workload.clients=0", "workload.clients"),
                                           ("+workload.request=8", "workload.request"),
                                           ("workload.phases=[{name: x, embed_share: 1.5}]",
                                            r"workload.phases\[0\].embed_share"),
                                           ("workload.phases=[{name: x, share: 0.5}]", r"workload.phases\[0\]"),
                                           ("workload.phases=[]", "workload.phases")])
def test_bad_workload_settings_are_user_errors_naming_the_key(override, key):
    from hydra import compose, initialize_config_dir

    from orthrus_rag.eval.bench.cli import workload_from_config
    from orthrus_rag.launch import CONF_DIR, UserError

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("bench", overrides=[override])
    with pytest.raises(UserError, match=key):
        workload_from_config(cfg)


def test_an_isolated_process_that_cannot_load_fails_at_once(tmp_path):
    import time

    from orthrus_rag.eval.bench.backends import IsolatedBackend
    from orthrus_rag.engine import SamplingParams

    config = EngineConfig(generator=str(tmp_path / "no-model"), embedder=None, device="cpu", dtype="float32")
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="exited while loading"):
        IsolatedBackend(config, SamplingParams(), PoolingParams(), threads=1)
    assert time.perf_counter() - start < 120  # not the 600 s a load may take
