"""The RAG stack from the Hydra config, in two calls that every entry point makes:

    plan = StackPlan.from_config(cfg, corpus)   # every setting checked, nothing loaded: a mistake fails at once
    stack = await plan.build(plan.start_engine())   # the index loaded (or built and cached), the pipelines built

It plans an index only when a pipeline retrieves (or the caller asks for one)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig

from orthrus_rag.engine import (AsyncEngine, EngineConfig, EngineError, EngineLike, InvalidRequestError,
                                PoolingParams)
from orthrus_rag.engine.lora import check_adapter_config
from orthrus_rag.files import cache_dir
from orthrus_rag.models import ModelNotFoundError, resolve_adapter_path
from orthrus_rag.models.device import cpu_flags, resolve_dtype
from orthrus_rag.models.registry import ADAPTERS_DIR
from orthrus_rag.rag import EngineReasoner, Passage, Pipeline, Retriever
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.retrieval import RetrievalMode, RetrievalSettings, SearchIndexes, make_retriever
from orthrus_rag.settings import UserError, check_settings, plain, typed, user_errors


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


@dataclasses.dataclass
class Stack:
    """What a plan builds over an engine: the indexes and retriever (None when nothing retrieves) and the
    pipelines by name (`pipeline` is the first one: a run's only pipeline)."""

    indexes: SearchIndexes | None
    retriever: Retriever | None
    pipelines: dict[str, Pipeline]

    @property
    def pipeline(self) -> Pipeline:
        return next(iter(self.pipelines.values()))


@dataclasses.dataclass
class StackPlan:
    """Every part of a stack, checked, nothing loaded (see the module's docstring)."""

    engine: EngineConfig
    embedding: EmbeddingRecipe
    index: IndexSource | None  # None: no pipeline retrieves
    pipelines: dict[str, dict[str, Any]]  # name -> its `pipeline` group (`name` plus settings), checked

    @classmethod
    def from_config(cls, cfg: DictConfig, corpus: Path | str | None = None,
                    pipelines: Mapping[str, Mapping[str, Any]] | None = None,
                    with_index: bool = False) -> StackPlan:
        """The plan for `cfg`. `pipelines`: name -> pipeline group (default: `cfg.pipeline`, when there is one);
        `corpus`: the passages file (None: the embedded demo corpus); `with_index`: plan the index even when no
        pipeline retrieves."""
        from pipelines import PIPELINES

        if pipelines is None:
            pipelines = {cfg.pipeline.name: cfg.pipeline} if cfg.get("pipeline") is not None else {}
        groups = {name: {"name": name, **plain(group)} for name, group in pipelines.items()}
        for group in groups.values():
            _make_pipeline(group, None, None)  # settings errors show before anything loads
        retrieves = any(PIPELINES[group["name"]].retrieves for group in groups.values())
        engine = _engine_config(cfg)
        embedding = _embedding(cfg, engine)
        index = _index_source(cfg, corpus, engine) if retrieves or with_index else None
        return cls(engine, embedding, index, groups)

    def sharing_cores(self, threads: int) -> StackPlan:
        """This plan with `threads` torch threads where runtime.num_threads is unset (an engine that shares the
        machine's cores with others: Ray workers and replicas)."""
        if self.engine.num_threads is not None:
            return self
        return dataclasses.replace(self, engine=dataclasses.replace(self.engine, num_threads=max(1, threads)))

    def start_engine(self) -> AsyncEngine:
        """An AsyncEngine with the planned config; a missing model or a bad runtime value is a UserError."""
        print(f"loading {self.engine.generator} and {self.engine.embedder or 'backbone embeddings'} ...",
              file=sys.stderr)
        with user_errors(ModelNotFoundError, InvalidRequestError,
                         suffix=" (check model.name, embedder.name and runtime.*)"):
            return AsyncEngine(self.engine)

    async def build(self, engine: EngineLike | None, indexes: SearchIndexes | None = None) -> Stack:
        """The stack over `engine`: the planned indexes (`indexes` when given, else each cached in its folder when
        it matches, else built, the dense one through `engine.embed`), the retriever over them, and the
        pipelines, each with that retriever and a reasoner on `engine`."""
        if indexes is None and self.index is not None:
            indexes = await _load_indexes(engine, self.index, self.embedding)
        retriever = make_retriever(engine, indexes, self.embedding) if indexes is not None else None
        reasoner = EngineReasoner(engine) if engine is not None else None
        built = {name: _make_pipeline(group, retriever, reasoner) for name, group in self.pipelines.items()}
        return Stack(indexes, retriever, built)


# ---- pipelines ------------------------------------------------------------------------------------------------
def _make_pipeline(group: Mapping[str, Any], retriever: Retriever | None, reasoner) -> Pipeline:
    """The pipeline a `pipeline` group names, with the group's other keys as its (checked) settings."""
    from pipelines import build_pipeline

    try:
        return build_pipeline(retriever=retriever, reasoner=reasoner, **group)
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, FileNotFoundError) as error:
        raise UserError(f"pipeline: {error.args[0] if error.args else error}") from error


# ---- engine and embedding -------------------------------------------------------------------------------------
def _engine_config(cfg: DictConfig) -> EngineConfig:
    """The `model`, `embedder` and `runtime` groups as an EngineConfig, its dtype resolved for this machine
    (runtime keys map one to one; the embedding adapter is runtime.embedding_adapter, else embedder.adapter)."""
    runtime = plain(cfg.runtime)
    check_settings(EngineConfig, runtime, "runtime", skip=("generator", "embedder"))
    runtime["embedding_adapter"] = _adapter_folder(cfg)
    with user_errors(ValueError):
        cpu_flags()  # a bad ORTHRUS_CPU_MAX_ISA fails here, before anything loads
    with user_errors(InvalidRequestError):
        config = EngineConfig(generator=cfg.model.name, embedder=cfg.embedder.name, **runtime)
    with user_errors(ValueError, prefix="runtime.dtype: "):
        dtype = resolve_dtype(config.dtype, config.device)
    return dataclasses.replace(config, dtype=str(dtype).removeprefix("torch."))


def _adapter_folder(cfg: DictConfig) -> str | None:
    """The adapter folder the engine applies to backbone embedding rows: runtime.embedding_adapter, else
    embedder.adapter (a shipped adapter's name or a PEFT folder); a shipped one must fit model.name."""
    name = cfg.runtime.get("embedding_adapter") or cfg.embedder.get("adapter")
    if not name:
        return None
    folder = resolve_adapter_path(name)
    config = folder / "adapter_config.json"
    if not config.is_file():
        raise UserError(f"embedding adapter {name!r}: {folder} is no PEFT LoRA folder (no adapter_config.json); "
                        "give a shipped adapter's name, a folder, or embedder.adapter=null for the raw backbone")
    settings = json.loads(config.read_text(encoding="utf-8"))
    with user_errors(InvalidRequestError):
        check_adapter_config(settings, folder)
    base = settings.get("base_model_name_or_path")
    if folder.parent == ADAPTERS_DIR and base and base != cfg.model.name:
        raise UserError(f"the shipped embedding adapter {name!r} was trained for {base!r}, not model.name="
                        f"{cfg.model.name!r}: use embedder=backbone_raw or embedder.adapter=<your adapter folder>")
    return str(folder)


def _embedding(cfg: DictConfig, engine: EngineConfig) -> EmbeddingRecipe:
    """How retrieval queries and passages are embedded (the `embedder` group): pooling, prefixes, the passage
    cut, the engine's adapter, and the dtype it computes in (it changes the vectors, so an index records it)."""
    model = cfg.embedder.model if cfg.embedder.name else "backbone"
    adapter = engine.embedding_adapter if model == "backbone" else None
    cut = cfg.embedder.get("passage_max_tokens")
    if cut is not None and (not isinstance(cut, int) or isinstance(cut, bool) or cut < 1):
        raise UserError(f"embedder.passage_max_tokens must be null (whole passages) or an integer >= 1, got {cut!r}")
    params = PoolingParams(cfg.embedder.pooling, cfg.embedder.normalize, model)
    try:
        params.validate()
    except InvalidRequestError as error:
        raise UserError(f"embedder.{error.param}: {error}") from error
    if adapter:  # recorded as `<folder name>@<first 12 hex digits of the weights' sha256>`
        weights = Path(adapter) / "adapter_model.safetensors"
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:12] if weights.is_file() else "missing"
        adapter = f"{Path(adapter).name}@{digest}"
    return EmbeddingRecipe(params, query_prefix=cfg.embedder.get("query_prefix") or "",
                           passage_prefix=cfg.embedder.get("passage_prefix") or "", passage_max_tokens=cut,
                           adapter=adapter, dtype=engine.dtype)


# ---- index ----------------------------------------------------------------------------------------------------
def _index_source(cfg: DictConfig, corpus: Path | str | None, engine: EngineConfig) -> IndexSource:
    """The corpus read, the name the index records for the model that embeds it (the backbone's with its adapter's
    name), and the index folders: `index.folder` (relative to where the command runs) or the cache's
    (`default_index_folder`, for the dtype passages are embedded in)."""
    from hydra.utils import to_absolute_path

    from indexes import CorpusFormatError, corpus_fingerprint, load_corpus
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
    from indexes import corpus_fingerprint

    safe = embedder.replace("/", "_").replace(":", "_") + (f"-{dtype}" if dtype else "")
    return cache_dir() / "indexes" / f"{corpus.stem}-{corpus_fingerprint(passages)}-{safe}"


async def _load_indexes(engine: EngineLike | None, source: IndexSource, embedding: EmbeddingRecipe) -> SearchIndexes:
    """The indexes `source.retrieval` searches, each loaded or built as `StackPlan.build` says."""
    from indexes import engine_embedder, load_or_build
    from indexes.bm25_index import load_or_build_bm25

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
