"""The machine's device and its fast dtype: `auto` resolved from CUDA's presence and the CPU's instruction flags."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
          "float16": torch.float16, "fp16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device = "auto") -> torch.dtype:
    """'auto' is the machine's fast type: bfloat16 on GPUs and on CPUs with AMX or AVX512-BF16, float32 on other CPUs
    (the speeds: docs/engine.md, docs/experiments.md)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        device = resolve_device(device) if isinstance(device, str) else device
        return torch.bfloat16 if native_bf16(device) else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(DTYPES)}; got {dtype!r}")
    return DTYPES[dtype]


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 matrix products are native on `device` (not on an AVX2-only CPU: docs/engine.md)."""
    return device.type != "cpu" or cpu_has_bf16()


def cpu_has_bf16() -> bool:
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


MAX_ISA_ENV = "ORTHRUS_CPU_MAX_ISA"  # avx2: see the CPU as an AVX2-only one (its AVX512 and AMX flags dropped)


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags, read once from /proc/cpuinfo (none where it cannot be read). With
    ORTHRUS_CPU_MAX_ISA=avx2 the AVX512 and AMX flags are left out, so `dtype: auto` and the kernel choice are those
    of an AVX2-only CPU (flags can only be removed, so nothing this CPU cannot run is ever picked)."""
    cap = os.environ.get(MAX_ISA_ENV, "").lower()
    if cap not in ("", "avx2"):  # checked first, so a bad value fails on every machine
        raise ValueError(f"{MAX_ISA_ENV} must be avx2 or unset, got {cap!r}")
    try:
        flags = frozenset(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return frozenset()
    return frozenset(f for f in flags if not f.startswith(("avx512", "amx"))) if cap else flags


def resolve_device(device: str) -> torch.device:
    """'auto' is cuda when a GPU is visible, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
