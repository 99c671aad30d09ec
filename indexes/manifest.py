"""The manifest saved next to a FAISS index: what built it, over which corpus."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

MANIFEST_FILE = "manifest.json"


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
