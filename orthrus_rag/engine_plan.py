"""The `model`, `embedder` and `runtime` groups as what the engine and the embedding need: an EngineConfig (its dtype
resolved for this machine), an EmbeddingRecipe, and where each model runs when not here (EndpointSettings); the
embedding adapter's folder is checked and its weights hashed (an index records which adapter embedded it)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from omegaconf import DictConfig

from orthrus_rag.engine import EngineConfig, InvalidRequestError, PoolingParams
from orthrus_rag.engine.lora import check_adapter_config
from orthrus_rag.models import resolve_adapter_path
from orthrus_rag.models.device import cpu_flags, resolve_dtype
from orthrus_rag.models.registry import ADAPTERS_DIR
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.rag.remote import EndpointSettings
from orthrus_rag.settings import UserError, check_settings, plain, user_errors


def engine_config(cfg: DictConfig) -> EngineConfig:
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


def embedding_recipe(cfg: DictConfig, engine: EngineConfig) -> EmbeddingRecipe:
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


def endpoint_settings(cfg: DictConfig, group: str) -> EndpointSettings:
    """The `model` or `embedder` group's endpoint keys (`endpoint`, `api_key_env`, `timeout_s`, `retries`); a wrong
    value is a UserError naming its key."""
    keys = {f.name for f in dataclasses.fields(EndpointSettings)}
    values = {key: value for key, value in plain(cfg[group]).items() if key in keys}
    check_settings(EndpointSettings, values, group)
    with user_errors(ValueError, prefix=f"{group}."):
        return EndpointSettings(**values)
