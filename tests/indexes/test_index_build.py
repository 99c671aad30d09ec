import hashlib
from types import SimpleNamespace

import numpy as np
import pytest

from orthrus_rag.indexes.build import embed_passages, engine_embedder, load_or_build
from orthrus_rag.indexes.faiss_index import DenseIndex
from orthrus_rag.engine import PoolingParams


class FakeEmbedder:
    """Deterministic unit vectors from a hash of the text; counts calls and texts."""

    def __init__(self, dim: int = 16):
        self.dim, self.calls, self.texts = dim, 0, 0

    def vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        rng = np.random.default_rng(seed)
        v = rng.standard_normal(self.dim).astype(np.float32)
        return v / np.linalg.norm(v)

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return np.stack([self.vector(t) for t in texts])


async def test_build_index_embeds_formatted_passages_in_batches(passages):
    embed = FakeEmbedder()
    index = DenseIndex.build(await embed_passages(passages, embed, batch_size=64), passages, "fake")
    assert embed.calls == 5 and embed.texts == 300
    hit = index.search(embed.vector(passages[42].formatted()), k=1)[0][0]
    assert hit.id == "p42"


async def test_load_or_build_builds_once(tmp_path, passages):
    embed = FakeEmbedder()
    first = await load_or_build(tmp_path / "cache", passages, embed, "fake")
    calls_after_first = embed.calls
    second = await load_or_build(tmp_path / "cache", passages, embed, "fake")
    assert calls_after_first == 5 and embed.calls == 5
    query = embed.vector("some question")
    assert second.search(query, k=5) == first.search(query, k=5)


async def test_load_or_build_rebuilds_for_a_changed_corpus(tmp_path, passages):
    embed = FakeEmbedder()
    await load_or_build(tmp_path, passages, embed, "fake")
    index = await load_or_build(tmp_path, passages[:100], embed, "fake")
    assert embed.calls == 5 + 2 and index.manifest.num_passages == 100


@pytest.mark.parametrize("lost", ["index", "save cut short"])
async def test_load_or_build_rebuilds_when_the_index_file_is_gone(tmp_path, passages, monkeypatch, lost):
    from orthrus_rag.indexes.faiss_index import INDEX_FILE, VECTORS_FILE, DenseIndex

    embed = FakeEmbedder()
    first = await load_or_build(tmp_path, passages, embed, "fake")
    if lost == "index":
        for name in (INDEX_FILE, VECTORS_FILE):
            (tmp_path / name).unlink(missing_ok=True)
    else:  # the save failed after removing the old files, before writing the new ones
        monkeypatch.setattr("orthrus_rag.indexes.faiss_index.np.save", _disk_full)
        monkeypatch.setattr("orthrus_rag.indexes.faiss_index.faiss_module", lambda: SimpleNamespace(write_index=_disk_full))
        with pytest.raises(OSError, match="disk full"):
            first.save(tmp_path)
        monkeypatch.undo()
        assert not (tmp_path / "manifest.json").exists()
    index = await load_or_build(tmp_path, passages, embed, "fake")
    assert embed.calls == 10 and len(index.passages) == 300
    assert DenseIndex.load(tmp_path, "fake", passages).manifest.num_passages == 300


def _disk_full(*args):
    raise OSError("disk full")


async def test_bad_embed_many_output_is_reported(passages):
    async def wrong(texts):
        return np.zeros((1, 4), np.float32)

    with pytest.raises(ValueError, match="must return an"):
        await embed_passages(passages, wrong)


class FakeEngine:
    def __init__(self):
        self.seen: list[tuple[str, PoolingParams]] = []

    async def embed(self, text, params):
        self.seen.append((text, params))
        return SimpleNamespace(embedding=np.full(3, len(text), dtype=np.float32))


async def test_engine_embedder_stacks_engine_outputs():
    from orthrus_rag.rag.embedding import EmbeddingRecipe

    engine, params = FakeEngine(), PoolingParams(pooling="mean")
    vectors = await engine_embedder(engine, EmbeddingRecipe(params))(["a", "bbb"])
    assert vectors.dtype == np.float32 and vectors.tolist() == [[1, 1, 1], [3, 3, 3]]
    assert [t for t, _ in engine.seen] == ["a", "bbb"] and all(p == params for _, p in engine.seen)


async def test_engine_embedder_puts_the_passage_prefix_first():
    from orthrus_rag.rag.embedding import EmbeddingRecipe

    engine, params = FakeEngine(), EmbeddingRecipe(passage_prefix="passage: ", query_prefix="query: ")
    await engine_embedder(engine, params)(["a"])
    assert engine.seen == [("passage: a", params.params)]


async def test_engine_embedder_cuts_passages_at_passage_max_tokens():
    from orthrus_rag.rag.embedding import EmbeddingRecipe

    engine = FakeEngine()
    await engine_embedder(engine, EmbeddingRecipe(PoolingParams(model="backbone"), passage_max_tokens=48))(["a"])
    await engine_embedder(engine, EmbeddingRecipe(PoolingParams(model="backbone")))(["b"])
    assert [(text, params.truncate) for text, params in engine.seen] == [("a", 48), ("b", None)]


async def test_load_or_build_records_the_recipe_and_rebuilds_for_another(tmp_path, passages):
    embed = FakeEmbedder()
    mean = {"pooling": "mean", "query_prefix": "query: ", "adapter": "a@1"}
    last = {**mean, "pooling": "last"}
    first = await load_or_build(tmp_path, passages, embed, "fake", embedding=mean)
    assert first.manifest.embedding == mean
    assert (await load_or_build(tmp_path, passages, embed, "fake", embedding=mean)).manifest.embedding == mean
    assert embed.calls == 5
    rebuilt = await load_or_build(tmp_path, passages, embed, "fake", embedding=last)
    assert embed.calls == 10 and rebuilt.manifest.embedding == last
