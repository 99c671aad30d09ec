"""Builders shared by the Hydra apps: the engine from the `model`/`embedder`/`runtime` groups, the dense index
from the `index` group, and clean exits for user mistakes."""
from __future__ import annotations

import hydra

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from orthrus_rag.engine import EngineConfig, PoolingParams
from orthrus_rag.models.registry import cache_dir

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
T = TypeVar("T")


class UserError(Exception):
    """A mistake in the command line or config: reported as one message, without a traceback."""


def fail(app: str, error: BaseException) -> NoReturn:
    print(f"{app}: error: {error}", file=sys.stderr)
    raise SystemExit(2)


def check_conf_dir(config_name: str) -> None:
    if not (CONF_DIR / f"{config_name}.yaml").is_file():
        raise SystemExit(f"config folder {CONF_DIR} with {config_name}.yaml not found: install orthrus-rag from "
                         "its repository (pip install -e .)")


def guarded(app: str, task: Callable[[DictConfig], T]) -> Callable[[DictConfig], T]:
    """`task` with UserError turned into a one-line message and exit status 2."""

    def run(cfg: DictConfig) -> T:
        try:
            return task(cfg)
        except UserError as error:
            fail(app, error)

    run.__name__ = task.__name__
    return run


def launch(app: str, config_name: str, task: Callable[[DictConfig], T]) -> None:
    """Run `task` as a Hydra app over `conf/<config_name>.yaml`, user errors as one-line messages."""
    check_conf_dir(config_name)
    hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(guarded(app, task))()


# ---- engine -------------------------------------------------------------------------------------------------
def engine_config(cfg: DictConfig) -> EngineConfig:
    """The `model`, `embedder` and `runtime` groups as an EngineConfig (runtime keys map one to one)."""
    runtime = OmegaConf.to_container(cfg.runtime, resolve=True)
    return EngineConfig(generator=cfg.model.name, embedder=cfg.embedder.name, **runtime)


def pooling_params(cfg: DictConfig) -> PoolingParams:
    """How retrieval queries and passages are embedded (the `embedder` group)."""
    model = cfg.embedder.model if cfg.embedder.name else "backbone"
    return PoolingParams(cfg.embedder.pooling, cfg.embedder.normalize, model)


def embedder_name(cfg: DictConfig) -> str:
    """The name an index records for the model that embedded it."""
    return cfg.embedder.name or f"{cfg.model.name}:backbone"


def start_engine(cfg: DictConfig) -> Any:
    """An AsyncEngine for the config; a model that cannot be found is a UserError."""
    from orthrus_rag.engine import AsyncEngine, InvalidRequestError
    from orthrus_rag.models import ModelNotFoundError

    print(f"loading {cfg.model.name} and {cfg.embedder.name or 'backbone embeddings'} ...", file=sys.stderr)
    try:
        return AsyncEngine(engine_config(cfg))
    except (ModelNotFoundError, InvalidRequestError) as error:
        raise UserError(f"{error} (check model.name, embedder.name and runtime.*)") from error


# ---- index --------------------------------------------------------------------------------------------------
@dataclass
class IndexSpec:
    """The `index` group: FAISS factory string, cache folder (None: derived) and embedding batch size."""

    factory: str = "Flat"
    folder: str | None = None
    batch_size: int = 64

    @classmethod
    def from_config(cls, index: DictConfig) -> IndexSpec:
        return cls(**OmegaConf.to_container(index, resolve=True))


def default_index_folder(corpus: Path, passages: list, embedder: str) -> Path:
    """`<orthrus-rag cache>/indexes/<corpus stem>-<fingerprint>-<embedder>`: one folder per corpus and embedder."""
    from indexes import corpus_fingerprint

    safe = embedder.replace("/", "_").replace(":", "_")
    return cache_dir() / "indexes" / f"{corpus.stem}-{corpus_fingerprint(passages)}-{safe}"


def read_corpus(path: Path) -> list:
    """The corpus passages; a missing or malformed file is a UserError."""
    from indexes import CorpusFormatError, load_corpus

    try:
        return load_corpus(path)
    except (FileNotFoundError, CorpusFormatError) as error:
        raise UserError(error) from error


def index_folder(cfg: DictConfig, corpus: Path, passages: list) -> Path:
    """`index.folder` (relative to where the command runs), or the cache folder for this corpus and embedder."""
    folder = cfg.index.folder
    return Path(to_absolute_path(folder)) if folder else default_index_folder(corpus, passages, embedder_name(cfg))


async def load_index(engine: Any, cfg: DictConfig, folder: Path, passages: list) -> Any:
    """The index cached in `folder` when it matches; else built through the engine (progress bar) and saved."""
    from indexes import engine_embedder, load_or_build
    from orthrus_rag.engine import EngineError

    spec = IndexSpec.from_config(cfg.index)
    try:
        return await load_or_build(folder, passages, engine_embedder(engine, pooling_params(cfg)),
                                   embedder_name(cfg), factory=spec.factory, batch_size=spec.batch_size)
    except ValueError as error:  # bad factory string, empty corpus
        if isinstance(error, EngineError):
            raise
        raise UserError(f"{error} (index.factory={spec.factory!r})") from error
