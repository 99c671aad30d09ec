"""What a stack searches: the `index` group (IndexSpec), where its indexes come from (IndexSource, with folders
named per corpus, embedder and dtype), and loading or building them."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from omegaconf import DictConfig

from orthrus_rag.engine import EngineConfig, EngineError, EngineLike
from orthrus_rag.files import cache_dir
from orthrus_rag.rag import Passage
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.retrieval import RetrievalMode, RetrievalSettings, SearchIndexes
from orthrus_rag.settings import UserError, typed, user_errors


@dataclasses.dataclass
class IndexSpec:
    """The `index` group, its settings and defaults written here only (conf/index/flat.yaml starts from them)."""

    factory: str = "Flat"  # a FAISS index_factory string: Flat (exact inner product), HNSW32, IVF64,PQ8, ...
    # null: <orthrus-rag cache>/indexes/<corpus>-<fingerprint>-<embedder>-<dtype>, and BM25 in
    # <cache>/bm25/<corpus>-<fingerprint>; a folder: the dense index there and BM25 in <folder>/bm25
    folder: str | None = None
    batch_size: int = 64  # passages embedded concurrently while building
    device: Literal["auto", "cpu", "cuda"] = "auto"  # where it searches (auto = cuda when available)
    retrieval: RetrievalMode = RetrievalSettings.mode  # dense | bm25 | hybrid (orthrus_rag/retrieval.py)
    rrf_k: float = RetrievalSettings.rrf_k  # hybrid: k in 1 / (k + rank), the usual 60
    candidates: int = RetrievalSettings.candidates  # hybrid: passages each side ranks (at least the k asked for)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UserError(f"index.batch_size must be >= 1, got {self.batch_size}")


@dataclasses.dataclass
class IndexSource:
    """Where the indexes come from: the dense one's cache folder (or built from `passages` and saved there) and
    the BM25 one's (`bm25_folder`), each when `retrieval` uses it."""

    folder: Path
    passages: list[Passage]
    embedder_name: str
    factory: str = IndexSpec.factory
    batch_size: int = IndexSpec.batch_size
    device: str = IndexSpec.device
    retrieval: RetrievalSettings = RetrievalSettings()
    bm25_folder: Path | None = None


def index_source(cfg: DictConfig, corpus: Path | str | None, engine: EngineConfig) -> IndexSource:
    """The corpus read, the name the index records for the model that embeds it (the backbone's with its adapter's
    name), and the index folders: `index.folder` (relative to where the command runs) or the cache's
    (`default_index_folder`, for the dtype passages are embedded in)."""
    from hydra.utils import to_absolute_path

    from orthrus_rag.indexes import CorpusFormatError, corpus_fingerprint, load_corpus
    from orthrus_rag.demo import demo_corpus_path

    spec = typed(IndexSpec, cfg.get("index") or {}, "index")
    with user_errors(ValueError):
        retrieval = RetrievalSettings(spec.retrieval, spec.rrf_k, spec.candidates)
    corpus = Path(corpus) if corpus else demo_corpus_path()
    with user_errors(FileNotFoundError, CorpusFormatError):  # a missing or malformed corpus file
        passages = load_corpus(corpus)
    if not passages:
        raise UserError(f"the corpus {corpus} holds no passages; give a .jsonl or .json file of passages")
    adapter = f"+{Path(engine.embedding_adapter).name}" if engine.embedding_adapter else ""
    name = cfg.embedder.name or f"{cfg.model.name}:backbone{adapter}"
    folder = (Path(to_absolute_path(spec.folder)) if spec.folder
              else default_index_folder(corpus, passages, name, engine.dtype))
    bm25_folder = (folder / "bm25" if spec.folder
                   else cache_dir() / "bm25" / f"{corpus.stem}-{corpus_fingerprint(passages)}")
    return IndexSource(folder, passages, name, spec.factory, spec.batch_size, spec.device, retrieval, bm25_folder)


def default_index_folder(corpus: Path, passages: list[Passage], embedder: str, dtype: str | None = None) -> Path:
    """`<orthrus-rag cache>/indexes/<corpus stem>-<fingerprint>-<embedder>[-<dtype>]`: one folder per corpus,
    embedder and the dtype passages are embedded in (so float32 and bfloat16 indexes are both kept)."""
    from orthrus_rag.indexes import corpus_fingerprint

    safe = embedder.replace("/", "_").replace(":", "_") + (f"-{dtype}" if dtype else "")
    return cache_dir() / "indexes" / f"{corpus.stem}-{corpus_fingerprint(passages)}-{safe}"


async def load_indexes(engine: EngineLike | None, source: IndexSource, embedding: EmbeddingRecipe) -> SearchIndexes:
    """The indexes `source.retrieval` searches, each loaded or built as `StackPlan.build` says."""
    from orthrus_rag.indexes import engine_embedder, load_or_build
    from orthrus_rag.indexes.bm25_index import load_or_build_bm25

    dense = None
    if source.retrieval.uses_dense:
        try:
            dense = await load_or_build(source.folder, source.passages, engine_embedder(engine, embedding),
                                        source.embedder_name, factory=source.factory, batch_size=source.batch_size,
                                        device=source.device, embedding=embedding.recipe())
        except EngineError:
            raise
        except ValueError as error:  # bad factory string or device, empty corpus
            raise UserError(f"{error} (index.factory={source.factory!r}, index.device={source.device!r})") from error
    bm25 = load_or_build_bm25(source.bm25_folder, source.passages) if source.retrieval.uses_bm25 else None
    return SearchIndexes(dense, bm25, source.retrieval)
