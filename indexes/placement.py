"""Where an index searches (`index.device=auto|cpu|cuda`) and with what: faiss on the CPU, faiss's GPU index when
faiss has GPU support, else exact search with torch on the device (`TorchFlatSearch`, for Flat indexes: the results of
faiss's Flat index, wherever torch runs, on a GPU without faiss-gpu or a machine without faiss at all). See
docs/benchmarks.md, "The index on the GPU"."""
from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any

import numpy as np
import torch

DEVICES = ("auto", "cpu", "cuda")
SCORE_BYTES = 256 * 2**20  # the (queries x passages) score block computed at once


class TorchFlatSearch:
    """Brute-force inner product (or squared L2) over float32 vectors held on `device`; `search` answers as a faiss
    index does: (scores, ids) arrays of shape (queries, k), best first."""

    def __init__(self, vectors: np.ndarray, metric: str = "ip", device: str | torch.device = "cpu"):
        if metric not in ("ip", "l2"):
            raise ValueError(f"metric must be ip or l2, got {metric!r}")
        self.metric, self.device = metric, torch.device(device)
        self.vectors = torch.as_tensor(np.ascontiguousarray(vectors, dtype=np.float32)).to(self.device)
        self.norms = (self.vectors * self.vectors).sum(1) if metric == "l2" else None

    @property
    def ntotal(self) -> int:
        return self.vectors.shape[0]

    def numpy(self) -> np.ndarray:
        return self.vectors.cpu().numpy()

    @torch.inference_mode()
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = torch.as_tensor(np.ascontiguousarray(queries, dtype=np.float32)).to(self.device)
        rows = max(1, SCORE_BYTES // (4 * max(1, self.ntotal)))
        scores, ids = zip(*(self._search_block(block, k) for block in queries.split(rows)))
        return torch.cat(scores).cpu().numpy(), torch.cat(ids).cpu().numpy().astype(np.int64)

    def _search_block(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        products = queries @ self.vectors.T
        if self.metric == "ip":
            return torch.topk(products, k, dim=1)
        distances = (queries * queries).sum(1, keepdim=True) - 2 * products + self.norms[None, :]
        scores, ids = torch.topk(distances, k, dim=1, largest=False)
        return scores.clamp_min(0), ids


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
        with contextlib.suppress(RuntimeError):  # index types faiss cannot move (HNSW) stay on the CPU
            return faiss_module().index_cpu_to_gpu(_gpu_resources(), 0, stored), "faiss-gpu"
    if factory == "Flat":
        vectors = stored.numpy() if on_torch else stored.reconstruct_n(0, stored.ntotal)
        return TorchFlatSearch(vectors, metric, device), "torch-cuda"
    warnings.warn(f"index {factory!r} cannot search on the GPU here (faiss-gpu missing or the index type cannot "
                  "move): it searches on the CPU", stacklevel=2)
    return stored, "faiss-cpu"


@functools.cache
def _gpu_resources():
    return faiss_module().StandardGpuResources()
