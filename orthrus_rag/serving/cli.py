"""`orthrus-rag-serve`: the HTTP server as a Hydra app (conf/serve.yaml).

    orthrus-rag-serve                                  # SmolLM2 + MiniLM on http://127.0.0.1:8000
    orthrus-rag-serve server.port=9000 runtime.dtype=float32
    orthrus-rag-serve model.name=/models/Llama-3-8B-Instruct embedder=backbone server.rag.enabled=false
"""
from __future__ import annotations

import asyncio
import logging

from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError

from orthrus_rag.cli.common import launch
from orthrus_rag.engine import AsyncEngine
from orthrus_rag.serving.settings import EmbeddingSettings, ServerSettings
from orthrus_rag.stack import UserError, embedder_name, engine_config, pooling_params, start_engine

APP = "orthrus-rag-serve"
log = logging.getLogger("orthrus_rag.serving")


def server_settings(cfg: DictConfig) -> ServerSettings:
    values = OmegaConf.to_container(cfg.server, resolve=True)
    embedder = OmegaConf.to_container(cfg.embedder, resolve=True)
    try:
        values["embedding"] = EmbeddingSettings(**{k: embedder[k] for k in ("pooling", "normalize", "model")})
        return ServerSettings.from_config(values)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise UserError(f"server.{key}: {first['msg']}, got {first.get('input')!r}") from error


def build_rag(engine: AsyncEngine, cfg: DictConfig, settings: ServerSettings):
    """The /v1/rag callable, or None when RAG is off. Builds (or loads the cached) index before serving."""
    if not settings.rag.enabled:
        return None
    from orthrus_rag.serving.rag_service import build_rag as build  # imports faiss and the pipelines

    return asyncio.run(build(engine, settings.rag, embedder_name(cfg), pooling_params(cfg)))


def run(cfg: DictConfig) -> None:
    from orthrus_rag.serving.app import create_app
    from orthrus_rag.serving.server import serve

    settings = server_settings(cfg)
    if settings.rag.enabled:
        from orthrus_rag.serving.rag_service import check_pipelines  # imports the pipelines

        check_pipelines(settings.rag)
    if settings.host not in ("127.0.0.1", "localhost", "::1") and settings.api_key is None:
        log.warning("serving on %s without an API key: anyone who can reach it can use it", settings.host)
    engine = start_engine(engine_config(cfg))
    try:
        rag = build_rag(engine, cfg, settings)
    except BaseException:
        engine.shutdown()
        raise
    serve(create_app(engine, settings, rag), settings)


def main() -> None:
    launch(APP, "serve", run)


if __name__ == "__main__":
    main()
