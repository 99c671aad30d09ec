"""Where an index searches (`index.device=auto|cpu|cuda`) and with what: faiss on the CPU, faiss's GPU index when
faiss has GPU support, else exact search with torch on the device (Flat indexes; the same results as faiss Flat).
See docs/benchmarks.md, "The index on the GPU"."""
from __future__ import annotations

import warnings
from typing import Any

import torch

from indexes.torch_search import TorchFlatSearch

DEVICES = ("auto", "cpu", "cuda")
_GPU_RESOURCES: list = []


def faiss_module():
    """faiss, or None where it is not installed (then only exact Flat search, with torch)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def faiss_has_gpu() -> bool:
    faiss = faiss_module()
    return faiss is not None and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def resolve_index_device(device: str) -> str:
    """auto = cuda when torch sees a GPU, else cpu; cuda without a GPU is refused."""
    if device not in DEVICES:
        raise ValueError(f"index.device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("index.device=cuda but torch sees no CUDA device: use index.device=cpu or auto")
    return device


def place(stored, factory: str, metric: str, device: str) -> tuple[Any, str]:
    """The searcher for `stored` (a faiss index, or TorchFlatSearch on the CPU where faiss is missing): anything with
    search(queries, k) -> (scores, ids), as a faiss index, and its backend (faiss-cpu | faiss-gpu | torch-cpu |
    torch-cuda)."""
    device = resolve_index_device(device)
    on_torch = isinstance(stored, TorchFlatSearch)
    if device == "cpu":
        return stored, "torch-cpu" if on_torch else "faiss-cpu"
    if not on_torch and faiss_has_gpu():
        moved = _faiss_to_gpu(stored)
        if moved is not stored:
            return moved, "faiss-gpu"
    if factory == "Flat":
        vectors = stored.numpy() if on_torch else stored.reconstruct_n(0, stored.ntotal)
        return TorchFlatSearch(vectors, metric, device), "torch-cuda"
    warnings.warn(f"index {factory!r} cannot search on the GPU here (faiss-gpu missing or the index type cannot "
                  "move): it searches on the CPU", stacklevel=2)
    return stored, "faiss-cpu"


def _faiss_to_gpu(index):
    """A faiss GPU copy of the index; index types faiss cannot move (HNSW) stay on the CPU."""
    faiss = faiss_module()
    if not _GPU_RESOURCES:
        _GPU_RESOURCES.append(faiss.StandardGpuResources())
    try:
        return faiss.index_cpu_to_gpu(_GPU_RESOURCES[0], 0, index)
    except RuntimeError:
        return index
