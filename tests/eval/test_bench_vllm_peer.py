"""The vllm modes without vLLM: how the two servers are started, and that a mode which cannot run is skipped with
one line while the others still run. (The modes themselves run where `./install.sh --peers vllm` was run:
docs/results.md.)"""
from __future__ import annotations

import json

import pytest

from orthrus_rag.engine import EngineConfig, PoolingParams, SamplingParams
from orthrus_rag.eval.bench import vllm_peer
from orthrus_rag.eval.bench.backends import ModeUnavailable
from orthrus_rag.eval.bench.runner import each_mode
from orthrus_rag.eval.bench.vllm_peer import VLLMBackend, core_sets


def test_without_the_environment_the_mode_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("ORTHRUS_VLLM_PYTHON", str(tmp_path / "missing" / "python"))
    with pytest.raises(ModeUnavailable, match=r"install.sh --peers vllm"):
        VLLMBackend(EngineConfig(), SamplingParams(), PoolingParams(), shared=False, logs=tmp_path)


def test_servers_get_the_models_dtype_cores_and_prefix_caching(monkeypatch, tmp_path):
    """A stand-in `python` records each server's command line and environment, then exits as a failed start."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n"
                    f"echo \"$VLLM_CPU_OMP_THREADS_BIND $*\" >> {tmp_path / 'calls'}\n"
                    "echo 'ValueError: no such model' ; exit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ORTHRUS_VLLM_PYTHON", str(fake))
    monkeypatch.setattr(vllm_peer, "resolve_model_path", lambda name: tmp_path / name)
    monkeypatch.setattr(vllm_peer.VLLMServer, "stop", lambda server: server.process.wait())  # both record first
    config = EngineConfig(generator="gen", embedder="emb", dtype="float32", max_model_len=1024)
    with pytest.raises(ModeUnavailable, match=r"the (gen|emb) server exited \(3\): ValueError: no such model"):
        VLLMBackend(config, SamplingParams(), PoolingParams(), shared=False, logs=tmp_path)
    calls = sorted((tmp_path / "calls").read_text().splitlines(), key=lambda line: "--runner" in line)
    gen, emb = calls
    assert f"--model {tmp_path / 'gen'} --served-model-name gen" in gen and "--enable-prefix-caching" in gen
    assert f"--model {tmp_path / 'emb'} --served-model-name emb" in emb and "--runner pooling" in emb
    assert all("--dtype float32 --max-model-len 1024" in c and "-m vllm.entrypoints.openai.api_server" in c
               for c in calls)
    assert [c.split()[0] for c in (gen, emb)] == list(core_sets(shared=False))


def test_the_backbone_embedder_is_refused():
    with pytest.raises(ModeUnavailable, match="co-located embedder"):
        VLLMBackend(EngineConfig(embedder=None), SamplingParams(), PoolingParams(model="backbone"), shared=True)


def test_cores_split_in_halves_or_shared(monkeypatch):
    monkeypatch.setattr(vllm_peer.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert core_sets(shared=False) == ("0,1", "2,3") and core_sets(shared=True) == ("0,1,2,3", "0,1,2,3")
    monkeypatch.setattr(vllm_peer.os, "sched_getaffinity", lambda pid: {5})
    assert core_sets(shared=False) == ("5", "5")


def test_a_mode_that_cannot_run_is_skipped_and_the_others_run(capsys):
    def run_one(mode: str) -> str:
        if mode == "vllm":
            raise ModeUnavailable("no vLLM environment")
        return mode.upper()

    done, skipped = each_mode(["hetero", "vllm", "hf"], run_one)
    assert done == {"hetero": "HETERO", "hf": "HF"} and skipped == {"skipped": {"vllm": "no vLLM environment"}}
    assert "vllm: skipped: no vLLM environment" in capsys.readouterr().out
    assert each_mode(["hf"], run_one) == ({"hf": "HF"}, {})
    json.dumps(skipped)  # it goes into bench.json as it is
