"""Exact search with torch: the same ids and scores as faiss's Flat index (and numpy), on the CPU and on the device
ORTHRUS_TEST_DEVICE names; a Flat index works without faiss installed."""
import os
import warnings

import numpy as np
import pytest

from orthrus_rag.indexes import placement
from orthrus_rag.indexes import faiss_index
from orthrus_rag.indexes.faiss_index import DenseIndex, IndexMismatchError
from orthrus_rag.indexes.placement import TorchFlatSearch
from orthrus_rag.rag.types import Passage

DEVICE = os.environ.get("ORTHRUS_TEST_DEVICE", "cpu")


def random_rows(n: int, d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def numpy_search(vectors, queries, k, metric):
    scores = queries @ vectors.T
    if metric == "l2":
        scores = ((queries[:, None, :] - vectors[None, :, :]) ** 2).sum(-1)
        ids = np.argsort(scores, axis=1, kind="stable")[:, :k]
    else:
        ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, ids, axis=1), ids


def assert_same_hits(got, want) -> None:
    """Same passages in the same order; scores equal up to float rounding (summation order differs)."""
    assert [[p.id for p in row] for row in got] == [[p.id for p in row] for row in want]
    assert np.allclose([[p.score for p in row] for row in got], [[p.score for p in row] for row in want], atol=1e-5)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_torch_search_matches_numpy_on_the_test_device(metric):
    vectors, queries = random_rows(3000, 48, 0), random_rows(70, 48, 1)
    scores, ids = TorchFlatSearch(vectors, metric, DEVICE).search(queries, 10)
    want_scores, want_ids = numpy_search(vectors, queries, 10, metric)
    assert ids.dtype == np.int64 and scores.dtype == np.float32 and ids.shape == (70, 10)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_torch_search_matches_faiss_flat(metric, monkeypatch):
    faiss = pytest.importorskip("faiss")
    vectors, queries = random_rows(5000, 64, 2), random_rows(33, 64, 3)
    flat = faiss.IndexFlatIP(64) if metric == "ip" else faiss.IndexFlatL2(64)
    flat.add(vectors)
    want_scores, want_ids = flat.search(queries, 7)
    monkeypatch.setattr("orthrus_rag.indexes.placement.SCORE_BYTES", 4 * 5000 * 4)  # blocks of 4 queries
    scores, ids = TorchFlatSearch(vectors, metric, DEVICE).search(queries, 7)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-4)


def test_dense_index_on_the_test_device_equals_the_cpu_index():
    vectors = random_rows(400, 32, 4)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    passages = [Passage(f"p{i}", f"T{i}", "") for i in range(400)]
    on_device = DenseIndex.build(vectors, passages, "fake", device=DEVICE)
    on_cpu = DenseIndex.build(vectors, passages, "fake", device="cpu")
    queries = random_rows(9, 32, 5)
    assert_same_hits(on_device.search(queries, k=8), on_cpu.search(queries, k=8))
    assert (on_device.backend in ("faiss-gpu", "torch-cuda")) == (DEVICE == "cuda")


@pytest.fixture
def no_faiss(monkeypatch):
    monkeypatch.setattr(placement, "faiss_module", lambda: None)
    monkeypatch.setattr(faiss_index, "faiss_module", lambda: None)


def test_flat_index_without_faiss_builds_saves_and_loads_back(no_faiss, tmp_path, monkeypatch):
    vectors = random_rows(300, 16, 6)
    passages = [Passage(f"p{i}", "", "") for i in range(300)]
    queries = random_rows(4, 16, 7)
    index = DenseIndex.build(vectors, passages, "fake", device="cpu")
    assert index.backend == "torch-cpu"
    index.save(tmp_path)
    assert (tmp_path / "vectors.npy").is_file() and not (tmp_path / "index.faiss").exists()
    loaded = DenseIndex.load(tmp_path, "fake", passages, device="cpu")
    assert loaded.search(queries, k=5) == index.search(queries, k=5)
    _, want_ids = numpy_search(vectors, queries, 5, "ip")
    assert [[p.id for p in row] for row in index.search(queries, k=5)] == [[f"p{i}" for i in r] for r in want_ids]
    monkeypatch.undo()
    if placement.faiss_module() is not None:  # a vectors.npy folder loads into faiss where faiss is installed
        with_faiss = DenseIndex.load(tmp_path, "fake", passages, device="cpu")
        assert with_faiss.backend == "faiss-cpu"
        assert_same_hits(with_faiss.search(queries, k=5), index.search(queries, k=5))


def test_without_faiss_only_flat_works_and_faiss_files_are_refused(no_faiss, tmp_path):
    passages = [Passage(f"p{i}", "", "") for i in range(50)]
    with pytest.raises(ValueError, match="only index.factory=Flat works"):
        DenseIndex.build(random_rows(50, 8, 8), passages, "fake", factory="HNSW32")
    (tmp_path / "index.faiss").write_bytes(b"")
    faiss_index.IndexManifest("fake", 8, "ip", "Flat", faiss_index.corpus_fingerprint(passages), 50).save(tmp_path)
    with pytest.raises(IndexMismatchError, match="pip install faiss-cpu"):
        DenseIndex.load(tmp_path, "fake", passages)


def test_gpu_placement_without_faiss_gpu(monkeypatch):
    """On a GPU: a Flat index goes to torch on the device; an approximate one stays with faiss on the CPU."""
    faiss = pytest.importorskip("faiss")
    monkeypatch.setattr(placement, "resolve_index_device", lambda device: "cuda")
    monkeypatch.setattr(placement, "faiss_has_gpu", lambda: False)

    class OnDevice:  # stands in for TorchFlatSearch on a device this machine may not have
        def __init__(self, vectors, metric, device):
            self.vectors, self.metric, self.device = vectors, metric, device

    monkeypatch.setattr(placement, "TorchFlatSearch", OnDevice)
    vectors = random_rows(100, 8, 9)
    flat = faiss.IndexFlatIP(8)
    flat.add(vectors)
    search, backend = placement.place(flat, "Flat", "ip", "auto")
    assert backend == "torch-cuda" and (search.metric, search.device) == ("ip", "cuda")
    np.testing.assert_array_equal(search.vectors, vectors)
    hnsw = faiss.index_factory(8, "HNSW32", faiss.METRIC_INNER_PRODUCT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert placement.place(hnsw, "HNSW32", "ip", "cuda")[1] == "faiss-cpu"
    assert "cannot search on the GPU" in str(caught[0].message)
