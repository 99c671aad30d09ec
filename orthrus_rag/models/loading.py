"""Load generators and embedders from resolved folders, with the project's dtype and thread defaults."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

# The tokenizers library's own thread pool would compete with torch's threads for the same cores whenever a client
# thread tokenises during a step; the engine tokenises one request at a time, which gains nothing from it.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from orthrus_rag.models.registry import resolve_model_path
from orthrus_rag.models.dummy import dummy_embedder_folder, dummy_generator, is_dummy  # noqa: I001 (after registry)

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
          "float16": torch.float16, "fp16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device = "auto") -> torch.dtype:
    """'auto' is the machine's fast type: bfloat16 on GPUs and on CPUs with AMX or AVX512-BF16 (2-3x faster than
    float32 there), float32 on other CPUs (where a bf16 matrix product was ~10x slower than float32)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        device = resolve_device(device) if isinstance(device, str) else device
        return torch.bfloat16 if native_bf16(device) else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(DTYPES)}; got {dtype!r}")
    return DTYPES[dtype]


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 matrix products are native on `device` (on an AVX2-only CPU they were ~10x slower than fp32)."""
    return device.type != "cpu" or cpu_has_bf16()


def cpu_has_bf16() -> bool:
    """The CPU has AVX512-BF16 or AMX."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags, read once from /proc/cpuinfo (none where it cannot be read)."""
    try:
        return frozenset(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return frozenset()


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def default_threads() -> int:
    """One core fewer than the process may use, at least one: the rest of the process (asyncio loop, clients,
    tokenisation, FAISS) keeps a core, so torch's threads, which wait for each other after every operator, are not
    descheduled mid-step. Measured on 2 cores: 1 thread beat 2 for decode steps whenever another thread was busy."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores - 1)


def set_threads(num_threads: int | None) -> int:
    """Set torch's intra-op threads (None: `default_threads()`); returns the count."""
    torch.set_num_threads(int(num_threads or default_threads()))
    return torch.get_num_threads()


def load_generator(name: str, dtype: str | torch.dtype = "auto", device: str = "auto", load_format: str = "auto"):
    """A causal LM and its tokenizer, in eval mode; random weights for a `dummy:` name or load_format=dummy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if is_dummy(name, load_format):
        return dummy_generator(resolve_model_path(name), resolve_dtype(dtype, device), resolve_device(device))
    path = resolve_model_path(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype, device))
    return model.to(resolve_device(device)).eval(), tokenizer


def load_embedder(name: str, dtype: str | torch.dtype = "auto", device: str = "auto", load_format: str = "auto"):
    """A sentence-transformers model (pooling and normalisation as the folder declares); random weights for a
    `dummy:` name or load_format=dummy."""
    from sentence_transformers import SentenceTransformer

    path = dummy_embedder_folder(name) if is_dummy(name, load_format) else resolve_model_path(name)
    model = SentenceTransformer(str(path), device=str(resolve_device(device)))
    return model.to(resolve_dtype(dtype, device)).eval()
