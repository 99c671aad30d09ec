"""Exact search with torch on any device: the results of faiss's Flat index, wherever torch runs (a GPU without
faiss-gpu, or a machine without faiss at all)."""
from __future__ import annotations

import numpy as np
import torch

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
