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

from indexes.manifest import MANIFEST_FILE
from orthrus_rag.cli.common import launch
from orthrus_rag.demo import demo_corpus_path
from orthrus_rag.stack import (IndexSource, IndexSpec, embedder_name, embedding_dtype, engine_config, index_source,
                               load_dense_index, pooling_params, start_engine, typed)

APP = "orthrus-rag-index"


@dataclass
class IndexReport:
    folder: Path
    num_passages: int
    dimension: int
    factory: str
    size_bytes: int
    seconds: float
    built: bool  # False: a matching cached index was loaded
    kind: str = "dense"  # dense | bm25

    def lines(self) -> str:
        what = "built" if self.built else "found cached"
        shape = f"dimension {self.dimension}, factory {self.factory}" if self.kind == "dense" else "BM25"
        name = "index" if self.kind == "dense" else "BM25 index"
        return (f"{name} {what} in {self.seconds:.1f} s: {self.folder}\n"
                f"  {self.num_passages} passages, {shape}, {self.size_bytes / 2**20:.1f} MiB on disk")


def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.is_file() else None


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def build(cfg: DictConfig) -> list[IndexReport]:
    corpus = Path(to_absolute_path(cfg.corpus)) if cfg.corpus else demo_corpus_path()
    source = index_source(typed(IndexSpec, cfg.index, "index"), corpus, embedder_name(cfg), embedding_dtype(cfg))
    reports = []
    if source.retrieval.uses_dense:
        reports.append(build_dense(cfg, source))
    if source.retrieval.uses_bm25:
        reports.append(build_bm25(source))
    return reports


def build_dense(cfg: DictConfig, source: IndexSource) -> IndexReport:
    folder = source.folder
    before = _mtime(folder / MANIFEST_FILE)
    engine = start_engine(engine_config(cfg))
    try:
        start = time.perf_counter()
        index = asyncio.run(load_dense_index(engine, source, pooling_params(cfg)))
        seconds = time.perf_counter() - start
    finally:
        engine.shutdown()
    m = index.manifest
    return IndexReport(folder, m.num_passages, m.dimension, m.factory, folder_size(folder), seconds,
                       built=_mtime(folder / MANIFEST_FILE) != before)


def build_bm25(source: IndexSource) -> IndexReport:
    from indexes.bm25_index import BM25_MANIFEST_FILE, load_or_build_bm25

    folder = source.bm25_folder
    before = _mtime(folder / BM25_MANIFEST_FILE)
    start = time.perf_counter()
    index = load_or_build_bm25(folder, source.passages)
    seconds = time.perf_counter() - start
    return IndexReport(folder, index.manifest.num_passages, 0, "", folder_size(folder), seconds,
                       built=_mtime(folder / BM25_MANIFEST_FILE) != before, kind="bm25")


def run(cfg: DictConfig) -> list[IndexReport]:
    reports = build(cfg)
    for report in reports:
        print(report.lines())
    return reports


def main() -> None:
    launch(APP, "index", run)


if __name__ == "__main__":
    main()
