"""dtype `auto` picks the machine's fast type: bfloat16 where bf16 matrix products are native, float32 elsewhere."""
import pytest
import torch

from orthrus_rag.models import device
from orthrus_rag.models.device import resolve_dtype


@pytest.mark.parametrize("has_bf16,want", [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_on_cpu_follows_the_cpu_flags(monkeypatch, has_bf16, want):
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: has_bf16)
    assert resolve_dtype("auto", "cpu") == want
    assert resolve_dtype("auto", torch.device("cpu")) == want


def test_auto_on_cuda_is_bfloat16(monkeypatch):
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: False)
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16


def test_named_dtypes_ignore_the_machine(monkeypatch):
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: False)
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16 and resolve_dtype("float32") == torch.float32
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("float8")


def test_cpu_flags_are_read_from_cpuinfo(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(device, "Path", lambda _: cpuinfo)
    for flags, want in [("fpu avx2 fma", False), ("avx2 avx512f avx512_bf16", True), ("avx2 amx_bf16 amx_tile", True)]:
        cpuinfo.write_text(f"processor : 0\nflags : {flags}\n")
        device.cpu_flags.cache_clear()
        assert device.cpu_has_bf16() is want, flags
    device.cpu_flags.cache_clear()


def test_max_isa_avx2_hides_avx512_and_amx(monkeypatch, tmp_path):
    from orthrus_rag.engine.attention.vllm_cpu import extension_for

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags : fpu avx2 fma avx512f avx512bw avx512dq avx512vl avx512_bf16 amx_bf16 amx_tile\n")
    monkeypatch.setattr(device, "Path", lambda _: cpuinfo)
    try:
        for cap, bf16, extension in [("", True, "_C"), ("avx2", False, "_C_AVX2"), ("AVX2", False, "_C_AVX2")]:
            monkeypatch.setenv(device.MAX_ISA_ENV, cap)
            device.cpu_flags.cache_clear()
            assert device.cpu_has_bf16() is bf16 and extension_for(device.cpu_flags()) == extension, cap
            assert resolve_dtype("auto", "cpu") == (torch.bfloat16 if bf16 else torch.float32)
        monkeypatch.setenv(device.MAX_ISA_ENV, "sse2")
        device.cpu_flags.cache_clear()
        with pytest.raises(ValueError, match="ORTHRUS_CPU_MAX_ISA must be avx2 or unset, got 'sse2'"):
            device.cpu_flags()
        monkeypatch.setattr(device, "Path", lambda _: tmp_path / "missing")  # no /proc/cpuinfo on this machine
        device.cpu_flags.cache_clear()
        with pytest.raises(ValueError, match="ORTHRUS_CPU_MAX_ISA must be avx2 or unset, got 'sse2'"):
            device.cpu_flags()
    finally:
        device.cpu_flags.cache_clear()
