"""The manifest saved next to a FAISS index: what built it, over which corpus; the check that a saved index
(dense or BM25) was built over a given corpus."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from orthrus_rag.rag.types import Passage

from .corpus import corpus_fingerprint

MANIFEST_FILE = "manifest.json"


class IndexMismatchError(ValueError):
    """A saved index built by another embedder or over another corpus."""


@dataclass
class IndexManifest:
    embedder: str
    dimension: int
    metric: str
    factory: str
    corpus_fingerprint: str
    num_passages: int
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    # how the vectors were made beyond the embedder's name (EmbeddingRecipe.recipe(): pooling, normalize,
    # query and passage prefixes, adapter); None for an index built without one
    embedding: dict[str, Any] | None = None

    def save(self, folder: Path) -> None:
        (folder / MANIFEST_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> IndexManifest:
        path = folder / MANIFEST_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no {MANIFEST_FILE} in {folder}: not a saved index (build it first)")
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def check_corpus(folder: Path, fingerprint: str, num_passages: int, corpus: Sequence[Passage]) -> None:
    """An IndexMismatchError unless the index saved in `folder` (its manifest's corpus fingerprint and passage
    count) was built over `corpus`."""
    given = corpus_fingerprint(corpus)
    if fingerprint != given or num_passages != len(corpus):
        raise IndexMismatchError(f"index in {folder} was built over another corpus ({num_passages} passages, "
                                 f"fingerprint {fingerprint}; given {len(corpus)}, {given}): rebuild it or point "
                                 "to another index folder")
