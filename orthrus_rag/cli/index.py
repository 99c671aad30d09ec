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
from dataclasses import dataclass
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from indexes.bm25_index import BM25_MANIFEST_FILE
from indexes.manifest import MANIFEST_FILE
from orthrus_rag.launch import launch
from orthrus_rag.stack import StackPlan

APP = "orthrus-rag-index"


@dataclass
class IndexReport:
    folder: Path
    num_passages: int
    dimension: int
    factory: str
    size_bytes: int
    built: bool  # False: a matching cached index was loaded
    kind: str = "dense"  # dense | bm25

    def lines(self) -> str:
        what = "built" if self.built else "found cached"
        shape = f"dimension {self.dimension}, factory {self.factory}" if self.kind == "dense" else "BM25"
        name = "index" if self.kind == "dense" else "BM25 index"
        return (f"{name} {what}: {self.folder}\n"
                f"  {self.num_passages} passages, {shape}, {self.size_bytes / 2**20:.1f} MiB on disk")


def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.is_file() else None


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def build(cfg: DictConfig) -> tuple[list[IndexReport], float]:
    """The indexes `index.retrieval` uses, each built (or found cached) and reported, and the seconds it took."""
    plan = StackPlan.from_config(cfg, to_absolute_path(cfg.corpus) if cfg.corpus else None, pipelines={},
                                 with_index=True)
    source = plan.index
    manifests = {"dense": source.folder / MANIFEST_FILE, "bm25": source.bm25_folder / BM25_MANIFEST_FILE}
    kinds = [kind for kind, used in (("dense", source.retrieval.uses_dense), ("bm25", source.retrieval.uses_bm25))
             if used]
    before = {kind: _mtime(manifests[kind]) for kind in kinds}
    engine = plan.start_engine() if source.retrieval.uses_dense else None
    try:
        start = time.perf_counter()
        indexes = asyncio.run(plan.build(engine)).indexes
        seconds = time.perf_counter() - start
    finally:
        if engine is not None:
            engine.shutdown()
    reports = []
    for kind in kinds:
        m, folder = (indexes.dense if kind == "dense" else indexes.bm25).manifest, manifests[kind].parent
        shape = (m.dimension, m.factory) if kind == "dense" else (0, "")
        reports.append(IndexReport(folder, m.num_passages, *shape, folder_size(folder),
                                   _mtime(manifests[kind]) != before[kind], kind))
    return reports, seconds


def run(cfg: DictConfig) -> list[IndexReport]:
    reports, seconds = build(cfg)
    for report in reports:
        print(report.lines())
    print(f"done in {seconds:.1f} s")
    return reports


def main() -> None:
    launch(APP, "index", run)


if __name__ == "__main__":
    main()
