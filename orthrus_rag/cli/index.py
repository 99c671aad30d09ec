"""`orthrus-rag-index`: build (or find cached) the FAISS index of a corpus, embedded through the engine, and the
BM25 index when `index.retrieval` is bm25 or hybrid.

    orthrus-rag-index                                         # the embedded demo corpus
    orthrus-rag-index corpus=../shared/data/2wiki/corpus.jsonl
    orthrus-rag-index corpus=my.jsonl index=hnsw index.folder=indexes/my-hnsw embedder=backbone
    orthrus-rag-index corpus=my.jsonl index.retrieval=hybrid
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from orthrus_rag.indexes.bm25_index import BM25_MANIFEST_FILE, BM25Manifest
from orthrus_rag.indexes.manifest import MANIFEST_FILE, IndexManifest
from orthrus_rag.launch import launch
from orthrus_rag.stack import StackPlan

APP = "orthrus-rag-index"


def _report(kind: str, folder: Path, manifest: IndexManifest | BM25Manifest, built: bool) -> str:
    name, shape = (("index", f"dimension {manifest.dimension}, factory {manifest.factory}") if kind == "dense"
                   else ("BM25 index", "BM25"))
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return (f"{name} {'built' if built else 'found cached'}: {folder}\n"
            f"  {manifest.num_passages} passages, {shape}, {size / 2**20:.1f} MiB on disk")


def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.is_file() else None


def run(cfg: DictConfig) -> None:
    """Build (or find cached) the indexes `index.retrieval` uses; report each, and the seconds it took."""
    plan = StackPlan.from_config(cfg, to_absolute_path(cfg.corpus) if cfg.corpus else None, pipelines={},
                                 with_index=True)
    source = plan.index
    # kind (a SearchIndexes field) -> the manifest file whose change means a build
    manifests = {"dense": source.folder / MANIFEST_FILE, "bm25": source.bm25_folder / BM25_MANIFEST_FILE}
    before = {kind: _mtime(path) for kind, path in manifests.items()}
    engine = plan.start_engine() if source.retrieval.uses_dense else None
    try:
        start = time.perf_counter()
        indexes = asyncio.run(plan.build(engine)).indexes
        seconds = time.perf_counter() - start
    finally:
        if engine is not None:
            engine.shutdown()
    for kind, path in manifests.items():
        if getattr(indexes, kind) is not None:  # the indexes `index.retrieval` uses
            print(_report(kind, path.parent, getattr(indexes, kind).manifest, _mtime(path) != before[kind]))
    print(f"done in {seconds:.1f} s")


def main() -> None:
    launch(APP, "index", run)


if __name__ == "__main__":
    main()
