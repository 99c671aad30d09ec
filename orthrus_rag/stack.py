"""The RAG stack from the Hydra config, one builder per part, used by every entry point: the engine (`model`,
`embedder`, `runtime` groups), the dense index (`index`), the retriever, reasoner and pipeline (`pipeline`).
Each group is checked against the dataclass it maps onto: an unknown key or a value of the wrong type is a
`UserError` naming the key, which the apps print as one line."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, OmegaConf

from orthrus_rag.engine import EngineConfig, PoolingParams
from orthrus_rag.models.registry import cache_dir
from orthrus_rag.retrieval import RetrievalMode, RetrievalSettings, SearchIndexes, make_retriever

if TYPE_CHECKING:
    from indexes import DenseIndex
    from orthrus_rag.engine import AsyncEngine, EngineLike
    from orthrus_rag.rag import Passage, Pipeline, Reasoner, Retriever
    from orthrus_rag.rag.embedding import RetrievalEmbedding

T = TypeVar("T")


class UserError(Exception):
    """A mistake in the command line or config: reported as one message, without a traceback."""


class SettingError(UserError, TypeError):
    """A config value that is no setting of its group, or of the wrong type; the message names the key."""


# ---- typed settings -------------------------------------------------------------------------------------------
def check_settings(cls: type, values: Mapping[str, Any], section: str, skip: tuple[str, ...] = ()) -> None:
    """Every key of `values` is an init field of the dataclass `cls` (less `skip`) and fits its type."""
    hints = get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in skip]
    for key, value in values.items():
        if key not in known:
            raise SettingError(f"{section}: no setting {key!r} ({section}.{key}); its settings are {known}")
        if not _fits(value, hints[key]):
            raise SettingError(f"{section}.{key}: expected {_describe(hints[key])}, got {value!r}")


def typed(cls: type[T], values: Mapping[str, Any] | DictConfig, section: str) -> T:
    """The config group `values` as the dataclass `cls`, checked first (`check_settings`)."""
    values = plain(values)
    check_settings(cls, values, section)
    return cls(**values)


def plain(values: Mapping[str, Any] | DictConfig) -> dict[str, Any]:
    """A config group as a plain dict, interpolations resolved."""
    return OmegaConf.to_container(values, resolve=True) if isinstance(values, DictConfig) else dict(values)


def _fits(value: Any, hint: Any) -> bool:
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if origin is Literal:
        return value in args
    if hint in (int, float):  # an int fits a float setting; a bool is neither
        return isinstance(value, (int, hint)) and not isinstance(value, bool)
    if hint is Path:
        return isinstance(value, (str, Path))
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    return isinstance(value, origin or hint)


_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null",
          Path: "a path"}


def _describe(hint: Any) -> str:
    if get_origin(hint) in (Union, types.UnionType, Literal):
        return " or ".join(_describe(arg) if get_origin(hint) is not Literal else repr(arg) for arg in get_args(hint))
    return _NAMES.get(hint, f"a {getattr(get_origin(hint) or hint, '__name__', hint)}")


# ---- engine ---------------------------------------------------------------------------------------------------
def engine_config(cfg: DictConfig) -> EngineConfig:
    """The `model`, `embedder` and `runtime` groups as an EngineConfig (runtime keys map one to one; the
    embedding adapter is `runtime.embedding_adapter`, else the embedder group's `adapter`)."""
    runtime = plain(cfg.runtime)
    check_settings(EngineConfig, runtime, "runtime", skip=("generator", "embedder"))
    runtime["embedding_adapter"] = embedding_adapter(cfg)
    return EngineConfig(generator=cfg.model.name, embedder=cfg.embedder.name, **runtime)


def embedding_adapter(cfg: DictConfig) -> str | None:
    """The adapter folder the engine applies to backbone embedding rows: runtime.embedding_adapter, else
    embedder.adapter (a shipped adapter's name or a PEFT folder); a shipped one must fit model.name."""
    name = cfg.runtime.get("embedding_adapter") or cfg.embedder.get("adapter")
    if not name:
        return None
    from orthrus_rag.models.registry import ADAPTERS_DIR, resolve_adapter_path

    folder = resolve_adapter_path(name)
    config = folder / "adapter_config.json"
    if not config.is_file():
        raise UserError(f"embedding adapter {name!r}: {folder} is no PEFT LoRA folder (no adapter_config.json); "
                        "give a shipped adapter's name, a folder, or embedder.adapter=null for the raw backbone")
    base = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if folder.parent == ADAPTERS_DIR and base and base != cfg.model.name:
        raise UserError(f"the shipped embedding adapter {name!r} was trained for {base!r}, not model.name="
                        f"{cfg.model.name!r}: use embedder=backbone_raw or embedder.adapter=<your adapter folder>")
    return str(folder)


def pooling_params(cfg: DictConfig) -> RetrievalEmbedding:
    """How retrieval queries and passages are embedded (the `embedder` group): pooling, prefixes, adapter."""
    from orthrus_rag.rag.embedding import RetrievalEmbedding

    model = cfg.embedder.model if cfg.embedder.name else "backbone"
    adapter = embedding_adapter(cfg) if model == "backbone" else None
    cut = cfg.embedder.get("passage_max_tokens")
    if cut is not None and (not isinstance(cut, int) or isinstance(cut, bool) or cut < 1):
        raise UserError(f"embedder.passage_max_tokens must be null (whole passages) or an integer >= 1, got {cut!r}")
    return RetrievalEmbedding(cfg.embedder.pooling, cfg.embedder.normalize, model,
                              query_prefix=cfg.embedder.get("query_prefix") or "",
                              passage_prefix=cfg.embedder.get("passage_prefix") or "",
                              adapter=adapter_identity(adapter) if adapter else None, passage_max_tokens=cut,
                              dtype=embedding_dtype(cfg))


def embedding_dtype(cfg: DictConfig) -> str:
    """The dtype the engine embeds in (`runtime.dtype`, auto resolved): it changes the vectors, so an index
    records it; a bad value is a UserError."""
    from orthrus_rag.models.loading import resolve_dtype

    try:
        return str(resolve_dtype(cfg.runtime.dtype, cfg.runtime.device)).removeprefix("torch.")
    except ValueError as error:
        raise UserError(f"runtime.dtype: {error}") from error


def adapter_identity(folder: str) -> str:
    """`<folder name>@<first 12 hex digits of the weights' sha256>`: what an index records about the adapter."""
    weights = Path(folder) / "adapter_model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:12] if weights.is_file() else "missing"
    return f"{Path(folder).name}@{digest}"


def embedder_name(cfg: DictConfig) -> str:
    """The name an index records for the model that embedded it (the backbone's with its adapter's name)."""
    if cfg.embedder.name:
        return cfg.embedder.name
    adapter = embedding_adapter(cfg)
    return f"{cfg.model.name}:backbone" + (f"+{Path(adapter).name}" if adapter else "")


def start_engine(config: EngineConfig) -> AsyncEngine:
    """An AsyncEngine; a missing model or a bad runtime value is a UserError."""
    from orthrus_rag.engine import AsyncEngine, InvalidRequestError
    from orthrus_rag.models import ModelNotFoundError

    print(f"loading {config.generator} and {config.embedder or 'backbone embeddings'} ...", file=sys.stderr)
    try:
        return AsyncEngine(config)
    except (ModelNotFoundError, InvalidRequestError) as error:
        raise UserError(f"{error} (check model.name, embedder.name and runtime.*)") from error


# ---- index ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class IndexSpec:
    """The `index` group: FAISS factory string, cache folder (None: derived), embedding batch size, and the device
    it searches on (auto = cuda when available: faiss's GPU index, else exact search with torch there); how it
    retrieves (dense | bm25 | hybrid) and, for hybrid, the fusion settings (orthrus_rag/retrieval.py)."""

    factory: str = "Flat"
    folder: str | None = None
    batch_size: int = 64
    device: str = "auto"
    retrieval: RetrievalMode = "dense"
    rrf_k: float = RetrievalSettings.rrf_k
    candidates: int = RetrievalSettings.candidates


@dataclasses.dataclass
class IndexSource:
    """Where a dense index comes from: its cache folder, or built from `passages` and saved there; likewise the
    BM25 index (`bm25_folder`) when `retrieval` uses one."""

    folder: Path
    passages: list[Passage]
    embedder_name: str
    factory: str = "Flat"
    batch_size: int = 64
    device: str = "auto"
    retrieval: RetrievalSettings = RetrievalSettings()
    bm25_folder: Path | None = None


def read_corpus(path: Path) -> list[Passage]:
    """The corpus passages; a missing or malformed file is a UserError."""
    from indexes import CorpusFormatError, load_corpus

    try:
        return load_corpus(path)
    except (FileNotFoundError, CorpusFormatError) as error:
        raise UserError(error) from error


def default_index_folder(corpus: Path, passages: list[Passage], embedder: str, dtype: str | None = None) -> Path:
    """`<orthrus-rag cache>/indexes/<corpus stem>-<fingerprint>-<embedder>[-<dtype>]`: one folder per corpus,
    embedder and the dtype passages are embedded in (so float32 and bfloat16 indexes are both kept)."""
    from indexes import corpus_fingerprint

    safe = embedder.replace("/", "_").replace(":", "_") + (f"-{dtype}" if dtype else "")
    return cache_dir() / "indexes" / f"{corpus.stem}-{corpus_fingerprint(passages)}-{safe}"


def index_source(spec: IndexSpec, corpus: Path, embedder: str, dtype: str | None = None) -> IndexSource:
    """The corpus read, and the index folder: `spec.folder` (relative to where the command runs) or the cache's
    (`default_index_folder`, for `dtype`, the embedding recipe's)."""
    from hydra.utils import to_absolute_path

    from indexes.bm25_index import default_bm25_folder

    try:
        retrieval = RetrievalSettings(spec.retrieval, spec.rrf_k, spec.candidates)
    except ValueError as error:
        raise UserError(error) from error
    passages = read_corpus(corpus)
    folder = (Path(to_absolute_path(spec.folder)) if spec.folder
              else default_index_folder(corpus, passages, embedder, dtype))
    bm25_folder = folder / "bm25" if spec.folder else default_bm25_folder(cache_dir(), corpus, passages)
    return IndexSource(folder, passages, embedder, spec.factory, spec.batch_size, spec.device, retrieval, bm25_folder)


async def load_index(engine: EngineLike, source: IndexSource, pooling: PoolingParams) -> SearchIndexes:
    """The indexes `source.retrieval` searches: each cached in its folder when it matches, else built (the dense
    one through `engine.embed`) and saved there."""
    from indexes.bm25_index import load_or_build_bm25

    dense = await load_dense_index(engine, source, pooling) if source.retrieval.uses_dense else None
    bm25_folder = source.bm25_folder or source.folder / "bm25"
    bm25 = load_or_build_bm25(bm25_folder, source.passages) if source.retrieval.uses_bm25 else None
    return SearchIndexes(dense, bm25, source.retrieval)


async def load_dense_index(engine: EngineLike, source: IndexSource, pooling: PoolingParams) -> DenseIndex:
    """The dense index cached in its folder when it matches; else built through `engine.embed` and saved there."""
    from indexes import engine_embedder, load_or_build
    from orthrus_rag.engine import EngineError

    try:
        return await load_or_build(source.folder, source.passages, engine_embedder(engine, pooling),
                                   source.embedder_name, factory=source.factory, batch_size=source.batch_size,
                                   device=source.device, embedding=_recipe(pooling))
    except ValueError as error:  # bad factory string or device, empty corpus
        if isinstance(error, EngineError):
            raise
        raise UserError(f"{error} (index.factory={source.factory!r}, index.device={source.device!r})") from error


def _recipe(pooling: PoolingParams) -> dict[str, Any] | None:
    return pooling.recipe() if hasattr(pooling, "recipe") else None


# ---- pipeline -------------------------------------------------------------------------------------------------
def make_pipeline(group: Mapping[str, Any], retriever: Retriever | None, reasoner: Reasoner | None) -> Pipeline:
    """The pipeline a `pipeline` group names, with the group's other keys as its (checked) settings."""
    from pipelines import build_pipeline

    settings = plain(group)
    name = settings.pop("name", None)
    try:
        return build_pipeline(name, retriever, reasoner, **settings)
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, FileNotFoundError) as error:
        raise UserError(f"pipeline: {error.args[0] if error.args else error}") from error


def rag_pipeline(group: Mapping[str, Any], engine: EngineLike, index: SearchIndexes | DenseIndex,
                 pooling: PoolingParams) -> Pipeline:
    """The pipeline over `engine`: the retriever of `index`'s retrieval mode and an EngineReasoner."""
    from orthrus_rag.rag import EngineReasoner

    return make_pipeline(group, make_retriever(engine, index, pooling), EngineReasoner(engine))
