import json

import numpy as np
import pytest

from orthrus_rag.indexes.faiss_index import DenseIndex, IndexMismatchError
from orthrus_rag.rag.types import Passage


def test_flat_search_orders_by_inner_product(passages, vectors):
    index = DenseIndex.build(vectors, passages, "fake-embedder")
    query = vectors[7] + 0.5 * vectors[3]
    hits = index.search(query[None, :], k=4)[0]
    expected = np.argsort(-(vectors @ query))[:4]
    assert [p.id for p in hits] == [f"p{i}" for i in expected]
    assert hits[0].score == pytest.approx(float(vectors[expected[0]] @ query), abs=1e-5)
    assert passages[7].score == 0.0  # the corpus itself is not modified


def test_save_load_round_trip(tmp_path, passages, vectors, make_unit_rows):
    index = DenseIndex.build(vectors, passages, "fake-embedder")
    index.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["num_passages"] == 300 and manifest["dimension"] == 32 and manifest["metric"] == "ip"
    loaded = DenseIndex.load(tmp_path / "idx", "fake-embedder", passages)
    queries = make_unit_rows(5, 32, seed=1)
    assert loaded.search(queries, k=10) == index.search(queries, k=10)


def test_load_refuses_another_embedder(tmp_path, passages, vectors):
    DenseIndex.build(vectors, passages, "fake-embedder").save(tmp_path)
    with pytest.raises(IndexMismatchError, match="other-embedder"):
        DenseIndex.load(tmp_path, "other-embedder", passages)


def test_load_refuses_a_changed_corpus(tmp_path, passages, vectors):
    DenseIndex.build(vectors, passages, "fake-embedder").save(tmp_path)
    changed = passages[:-1] + [Passage("p299", "Title 299", "Edited text.")]
    with pytest.raises(IndexMismatchError, match="another corpus"):
        DenseIndex.load(tmp_path, "fake-embedder", changed)


def test_load_refuses_a_manifest_without_its_index_file(tmp_path, passages, vectors):
    DenseIndex.build(vectors, passages, "fake-embedder").save(tmp_path)
    for name in ("index.faiss", "vectors.npy"):
        (tmp_path / name).unlink(missing_ok=True)
    with pytest.raises(IndexMismatchError, match="holds a manifest but no index.faiss"):
        DenseIndex.load(tmp_path, "fake-embedder", passages)


@pytest.mark.parametrize("factory", ["HNSW32", "IVF16,Flat", "IVF64,PQ8"])
def test_approximate_factories_find_a_duplicate_first(factory, make_unit_rows):
    vectors = make_unit_rows(2000, 32, seed=2)
    corpus = [Passage(str(i), "", "") for i in range(len(vectors))]
    index = DenseIndex.build(vectors, corpus, "fake-embedder", factory=factory)
    assert index.cpu_index.is_trained and index.cpu_index.ntotal == 2000
    picks = [5, 123, 1999]
    results = index.search(vectors[picks], k=3)
    assert [hits[0].id for hits in results] == [str(i) for i in picks]


def test_l2_scores_are_negated_distances(passages, vectors):
    index = DenseIndex.build(vectors, passages, "fake-embedder", metric="l2")
    hit = index.search(vectors[4], k=1)[0][0]
    assert hit.id == "p4" and hit.score == pytest.approx(0.0, abs=1e-5)


def test_clear_errors(passages, vectors):
    with pytest.raises(ValueError, match="one vector a passage"):
        DenseIndex.build(vectors[:10], passages, "fake-embedder")
    with pytest.raises(ValueError, match="index_factory string"):
        DenseIndex.build(vectors, passages, "fake-embedder", factory="NotAnIndex")
    with pytest.raises(ValueError, match="training index"):
        DenseIndex.build(vectors[:20], passages[:20], "fake-embedder", factory="IVF64,Flat")
    index = DenseIndex.build(vectors, passages, "fake-embedder")
    with pytest.raises(ValueError, match="dimension 16"):
        index.search(np.zeros((1, 16), np.float32))


def test_device_is_checked_and_defaults_to_where_torch_sees_a_gpu(passages, vectors):
    import torch

    from orthrus_rag.indexes.placement import faiss_has_gpu

    with pytest.raises(ValueError, match="index.device must be one of auto, cpu, cuda"):
        DenseIndex.build(vectors, passages, "fake-embedder", device="gpu")
    index = DenseIndex.build(vectors, passages, "fake-embedder")
    if torch.cuda.is_available():
        assert index.backend == ("faiss-gpu" if faiss_has_gpu() else "torch-cuda")
    else:
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            DenseIndex.build(vectors, passages, "fake-embedder", device="cuda")
        assert index.backend == "faiss-cpu"
    assert DenseIndex.build(vectors, passages, "fake-embedder", device="cpu").backend == "faiss-cpu"


def test_load_refuses_another_embedding_recipe(tmp_path, passages, vectors):
    recipe = {"pooling": "mean", "query_prefix": "query: ", "passage_prefix": "", "adapter": "a@0123"}
    DenseIndex.build(vectors, passages, "fake-embedder", embedding=recipe).save(tmp_path)
    assert DenseIndex.load(tmp_path, "fake-embedder", passages, expected_embedding=recipe).manifest.embedding == recipe
    with pytest.raises(IndexMismatchError, match="'pooling': 'last'.*rebuild it"):
        DenseIndex.load(tmp_path, "fake-embedder", passages, expected_embedding={**recipe, "pooling": "last"})
