"""Loading vLLM's CPU kernels: the extension the CPU can run, the pinned version only, and a clear reason where they
cannot be used."""
import importlib.metadata
import re
from pathlib import Path

import pytest
import torch

from orthrus_rag.engine.attention import vllm_cpu

AVX512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"}


@pytest.mark.parametrize("flags,want", [
    ({"sse4_2"}, None), ({"avx2", "fma"}, "_C_AVX2"), (AVX512, "_C_AVX512"), (AVX512 | {"avx512_bf16"}, "_C_AVX512"),
    (AVX512 | {"amx_bf16", "amx_tile"}, "_C"), ({"avx2", "fma", "avx512f"}, "_C_AVX2")])
def test_the_extension_follows_the_cpu_flags(flags, want):
    assert vllm_cpu.extension_for(frozenset(flags)) == want


def missing(name):
    raise importlib.metadata.PackageNotFoundError(name)


@pytest.mark.parametrize("version,why", [(lambda name: "0.1.0", "vllm-cpu 0.1.0 is installed; the kernels are used "
                                          "with 0.32.0 only"), (missing, "vllm-cpu is not installed (./install.sh")])
def test_only_the_pinned_version_is_loaded(monkeypatch, version, why):
    monkeypatch.setattr(importlib.metadata, "version", version)
    vllm_cpu.load.cache_clear()
    try:
        assert why in vllm_cpu.load()
    finally:
        monkeypatch.undo()
        vllm_cpu.load.cache_clear()


@pytest.mark.parametrize("head_dim,block,dtype,why", [(16, 16, torch.float32, "head_dim 16"),
                                                      (64, 8, torch.float32, "block_size 8"),
                                                      (64, 16, torch.float16, "neither float32 nor bfloat16")])
def test_shapes_the_kernels_do_not_take(head_dim, block, dtype, why):
    assert why in vllm_cpu.unsupported(head_dim, block, dtype)


def test_the_docs_name_the_head_sizes_the_kernels_take():
    docs = (Path(__file__).parents[3] / "docs" / "engine.md").read_text(encoding="utf-8")
    listed = re.search(r"a head size of ([\d, or]+) \(`HEAD_DIMS`", docs).group(1)
    assert {int(n) for n in re.findall(r"\d+", listed)} == vllm_cpu.HEAD_DIMS


@pytest.mark.skipif(vllm_cpu.unsupported(64, 16, torch.float32) is not None, reason="vLLM CPU kernels absent")
def test_the_pinned_kernels_load_here():
    assert vllm_cpu.load() is None and hasattr(torch.ops._C, "cpu_attention_with_kv_cache")
