"""A dense passage index over FAISS, with a manifest that guards against stale indexes. It searches where
`device` says (indexes/placement.py); without faiss installed, Flat indexes still work (exact search with torch)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from orthrus_rag.rag.types import Passage

from .corpus import corpus_fingerprint
from .manifest import MANIFEST_FILE, IndexManifest, IndexMismatchError, check_corpus
from .placement import TorchFlatSearch, faiss_module, place

INDEX_FILE = "index.faiss"
VECTORS_FILE = "vectors.npy"  # a Flat index saved where faiss is not installed
METRICS = ("ip", "l2")


class DenseIndex:
    """FAISS vectors for a list of passages; row i of the index is passages[i]. `cpu_index` is the stored index
    (a faiss index, or TorchFlatSearch where faiss is missing); `search_index` searches on `device`
    (auto | cpu | cuda) and `backend` names it (faiss-cpu, faiss-gpu, torch-cpu, torch-cuda)."""

    def __init__(self, index, passages: Sequence[Passage], manifest: IndexManifest, device: str = "auto"):
        self.cpu_index = index
        self.passages = list(passages)
        self.manifest = manifest
        self.search_index, self.backend = place(index, manifest.factory, manifest.metric, device)

    @classmethod
    def build(cls, vectors: np.ndarray, passages: Sequence[Passage], embedder_name: str, factory: str = "Flat",
              metric: str = "ip", nprobe: int = 16, device: str = "auto",
              embedding: dict[str, Any] | None = None) -> DenseIndex:
        """Index an (n, d) float32 matrix, training the index first when the factory string needs it."""
        vectors = _as_matrix(vectors)
        if len(vectors) != len(passages):
            raise ValueError(f"got {len(vectors)} vectors for {len(passages)} passages: give one vector a passage")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
        index = _new_index(vectors, factory, metric, nprobe)
        manifest = IndexManifest(embedder=embedder_name, dimension=vectors.shape[1], metric=metric,
                                 factory=factory, corpus_fingerprint=corpus_fingerprint(passages),
                                 num_passages=len(passages), embedding=embedding)
        return cls(index, passages, manifest, device)

    def search(self, query_vectors: np.ndarray, k: int = 5) -> list[list[Passage]]:
        """The k best passages for each query row, best first, with `score` filled (higher is better)."""
        queries = _as_matrix(query_vectors)
        if queries.shape[1] != self.manifest.dimension:
            raise ValueError(f"query vectors have dimension {queries.shape[1]}, the index has "
                             f"{self.manifest.dimension}: embed queries with {self.manifest.embedder!r}")
        k = min(k, len(self.passages))
        scores, ids = self.search_index.search(queries, k)
        scores = -scores if self.manifest.metric == "l2" else scores  # faiss's l2 scores are distances
        return [[dataclasses.replace(self.passages[i], score=float(s)) for i, s in zip(row_ids, row_scores) if i >= 0]
                for row_ids, row_scores in zip(ids, scores)]

    def save(self, folder: str | Path) -> None:
        """Write `index.faiss` (`vectors.npy` where faiss is missing), then `manifest.json`, into `folder`; the old
        manifest goes first, so a save cut short leaves no manifest over a missing or partial index."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in (MANIFEST_FILE, INDEX_FILE, VECTORS_FILE):
            (folder / name).unlink(missing_ok=True)
        if isinstance(self.cpu_index, TorchFlatSearch):
            np.save(folder / VECTORS_FILE, self.cpu_index.numpy())
        else:
            faiss_module().write_index(self.cpu_index, str(folder / INDEX_FILE))
        self.manifest.save(folder)

    @classmethod
    def load(cls, folder: str | Path, expected_embedder: str, corpus: Sequence[Passage],
             device: str = "auto", expected_embedding: dict[str, Any] | None = None) -> DenseIndex:
        """Read a saved index, refusing it when it was built by another embedder, over another corpus, or (when
        `expected_embedding` is given) with another recipe (pooling, prefixes, adapter)."""
        folder = Path(folder)
        manifest = IndexManifest.load(folder)
        if manifest.embedder != expected_embedder:
            raise IndexMismatchError(f"index in {folder} was built with embedder {manifest.embedder!r}, not "
                                     f"{expected_embedder!r}: rebuild it or point to another index folder")
        check_corpus(folder, manifest.corpus_fingerprint, manifest.num_passages, corpus)
        if expected_embedding is not None and manifest.embedding != expected_embedding:
            raise IndexMismatchError(f"index in {folder} was embedded with {manifest.embedding}, not "
                                     f"{expected_embedding}: rebuild it with these embedder settings or point to "
                                     "another index folder")
        return cls(_read_index(folder, manifest), corpus, manifest, device)


def _read_index(folder: Path, manifest: IndexManifest):
    faiss = faiss_module()
    if not any((folder / name).is_file() for name in (INDEX_FILE, VECTORS_FILE)):
        raise IndexMismatchError(f"{folder} holds a manifest but no {INDEX_FILE} (or {VECTORS_FILE}): the index "
                                 "was deleted or its save cut short; rebuild it or point to another index folder")
    if (folder / INDEX_FILE).is_file():
        if faiss is None:
            raise IndexMismatchError(f"the index in {folder} is a faiss file and faiss is not installed: "
                                     "pip install faiss-cpu, or rebuild it here")
        return faiss.read_index(str(folder / INDEX_FILE))
    return _new_index(np.load(folder / VECTORS_FILE), "Flat", manifest.metric, 1)


def _as_matrix(vectors: np.ndarray) -> np.ndarray:
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2:
        raise ValueError(f"expected an (n, d) matrix of vectors, got shape {matrix.shape}")
    return matrix


def _new_index(vectors: np.ndarray, factory: str, metric: str, nprobe: int):
    """A faiss index of `factory` over `vectors`, trained first when the factory needs it; where faiss is not
    installed, a Flat one searched with torch."""
    faiss = faiss_module()
    if faiss is None:
        if factory != "Flat":
            raise ValueError(f"faiss is not installed, so only index.factory=Flat works (exact search with torch); "
                             f"pip install faiss-cpu for {factory!r}")
        return TorchFlatSearch(vectors, metric)
    metrics = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
    try:
        index = faiss.index_factory(vectors.shape[1], factory, metrics[metric])
    except RuntimeError as e:
        raise ValueError(f"faiss cannot build index {factory!r} for dimension {vectors.shape[1]}: {e}. "
                         "Use a faiss index_factory string such as 'Flat', 'HNSW32' or 'IVF64,PQ8'") from e
    _skip_polysemous_training(index)
    if not index.is_trained:
        try:
            index.train(vectors)
        except RuntimeError as e:
            raise ValueError(f"training index {factory!r} on {len(vectors)} vectors failed: {e}. "
                             "Give more passages or a smaller factory (fewer IVF lists, fewer PQ bits)") from e
    index.add(vectors)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:  # an IVF index searches `nprobe` of its lists
        ivf.nprobe = min(nprobe, ivf.nlist)
    return index


def _skip_polysemous_training(index) -> None:
    """PQ codes are trained for polysemous search by default, which costs seconds and serves only
    Hamming-filtered search (off unless `polysemous_ht` is set); plain PQ search does not need it. This holds for
    the index and every index it wraps (pre-transforms, refinement)."""
    faiss = faiss_module()
    index = faiss.downcast_index(index)
    if hasattr(index, "do_polysemous_training"):
        index.do_polysemous_training = False
    for attribute in ("index", "base_index"):
        inner = getattr(index, attribute, None)
        if isinstance(inner, faiss.Index):
            _skip_polysemous_training(inner)
