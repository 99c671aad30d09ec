"""Embed a corpus and build (or load back) its dense index."""
from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from orthrus_rag.engine import EngineLike
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.rag.types import Passage

from .faiss_index import DenseIndex, IndexMismatchError
from .manifest import MANIFEST_FILE

EmbedMany = Callable[[list[str]], Awaitable[np.ndarray]]


async def embed_passages(passages: Sequence[Passage], embed_many: EmbedMany, batch_size: int = 64) -> np.ndarray:
    """Embed `passage.formatted()` for every passage, batch by batch, into an (n, d) float32 matrix."""
    if not passages:
        raise ValueError("cannot build an index over an empty corpus: check the corpus path")
    texts = [p.formatted() for p in passages]
    batches = []
    with tqdm(total=len(texts), desc="embedding passages", unit="passage") as bar:
        for start in range(0, len(texts), batch_size):
            batch = texts[start:start + batch_size]
            vectors = np.asarray(await embed_many(batch), dtype=np.float32)
            if vectors.ndim != 2 or len(vectors) != len(batch):
                raise ValueError(f"embed_many returned shape {vectors.shape} for {len(batch)} texts; "
                                 f"it must return an ({len(batch)}, dim) matrix")
            batches.append(vectors)
            bar.update(len(batch))
    return np.concatenate(batches, axis=0)


async def load_or_build(cache_folder: str | Path, passages: Sequence[Passage], embed_many: EmbedMany,
                        embedder_name: str, factory: str = "Flat", batch_size: int = 64,
                        device: str = "auto", embedding: dict[str, Any] | None = None) -> DenseIndex:
    """Load the index cached in `cache_folder` when it matches (embedder, corpus, factory and, when given, the
    `embedding` recipe: pooling, prefixes, adapter, which the manifest records); otherwise embed the passages, index
    them and save the index there. It searches on `device` (auto | cpu | cuda: see indexes/placement.py)."""
    folder = Path(cache_folder)
    if (folder / MANIFEST_FILE).is_file():
        with contextlib.suppress(IndexMismatchError):
            index = DenseIndex.load(folder, embedder_name, passages, device, embedding)
            if index.manifest.factory == factory:
                return index
    vectors = await embed_passages(passages, embed_many, batch_size)
    index = DenseIndex.build(vectors, passages, embedder_name, factory=factory, device=device, embedding=embedding)
    index.save(folder)
    return index


def engine_embedder(engine: EngineLike, embedding: EmbeddingRecipe) -> EmbedMany:
    """An `embed_many` that sends one `engine.embed` request a text, all at once, and stacks the vectors; each
    text gets the recipe's `passage_prefix` first and is cut at its `passage_max_tokens`."""
    prefix, params = embedding.passage_prefix, embedding.for_passages()

    async def embed_many(texts: list[str]) -> np.ndarray:
        outputs = await asyncio.gather(*(engine.embed(prefix + text, params) for text in texts))
        return np.stack([np.asarray(out.embedding, dtype=np.float32) for out in outputs])

    return embed_many
