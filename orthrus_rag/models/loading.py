"""Load generators and embedders from resolved folders, with the project's dtype and thread defaults."""
from __future__ import annotations

import torch

from orthrus_rag.models.registry import resolve_model_path
from orthrus_rag.models.dummy import dummy_embedder_folder, dummy_generator, is_dummy  # noqa: I001 (after registry)

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
          "float16": torch.float16, "fp16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'auto' is bfloat16 (2-3x faster than float32 on CPUs with AMX, native on GPUs)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(DTYPES)}; got {dtype!r}")
    return DTYPES[dtype]


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def set_threads(num_threads: int | None) -> None:
    if num_threads:
        torch.set_num_threads(int(num_threads))


def load_generator(name: str, dtype: str | torch.dtype = "auto", device: str = "auto", load_format: str = "auto"):
    """A causal LM and its tokenizer, in eval mode; random weights for a `dummy:` name or load_format=dummy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if is_dummy(name, load_format):
        return dummy_generator(resolve_model_path(name), resolve_dtype(dtype), resolve_device(device))
    path = resolve_model_path(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype))
    return model.to(resolve_device(device)).eval(), tokenizer


def load_embedder(name: str, dtype: str | torch.dtype = "auto", device: str = "auto", load_format: str = "auto"):
    """A sentence-transformers model (pooling and normalisation as the folder declares); random weights for a
    `dummy:` name or load_format=dummy."""
    from sentence_transformers import SentenceTransformer

    path = dummy_embedder_folder(name) if is_dummy(name, load_format) else resolve_model_path(name)
    model = SentenceTransformer(str(path), device=str(resolve_device(device)))
    return model.to(resolve_dtype(dtype)).eval()
