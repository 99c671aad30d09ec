"""Load generators and embedders from resolved folders, with the project's dtype and thread defaults."""
from __future__ import annotations

import os

import torch

# The tokenizers library's own thread pool would compete with torch's threads for the same cores whenever a client
# thread tokenises during a step; the engine tokenises one request at a time, which gains nothing from it.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from orthrus_rag.models.device import resolve_device, resolve_dtype  # noqa: E402 (after the environment is set)
from orthrus_rag.models.dummy import dummy_embedder_folder, dummy_generator, is_dummy  # noqa: E402
from orthrus_rag.models.registry import resolve_model_path  # noqa: E402


def usable_cores() -> int:
    """The cores this process may run on: torch's thread count by default (docs/engine.md: Threads)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def set_threads(num_threads: int | None) -> int:
    """Set torch's intra-op threads (None: every usable core); returns the count."""
    torch.set_num_threads(int(num_threads or usable_cores()))
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


def load_tokenizer(name: str):
    """The generator's tokenizer alone (its chat template), without its weights."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_path(name))


def load_embedder(name: str, dtype: str | torch.dtype = "auto", device: str = "auto", load_format: str = "auto"):
    """A sentence-transformers model (pooling and normalisation as the folder declares); random weights for a
    `dummy:` name or load_format=dummy."""
    from sentence_transformers import SentenceTransformer

    path = dummy_embedder_folder(name, resolve_model_path) if is_dummy(name, load_format) else resolve_model_path(name)
    model = SentenceTransformer(str(path), device=str(resolve_device(device)))
    return model.to(resolve_dtype(dtype, device)).eval()
