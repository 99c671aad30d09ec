"""`orthrus-rag-serve`: the HTTP server as a Hydra app (conf/serve.yaml).

    orthrus-rag-serve                                  # SmolLM2 + MiniLM on http://127.0.0.1:8000
    orthrus-rag-serve server.port=9000 runtime.dtype=float32
    orthrus-rag-serve model.name=/models/Llama-3-8B-Instruct embedder=backbone server.rag.enabled=false
    orthrus-rag-serve server.replicas=4 server.num_gpus=1         # 4 engines on Ray Serve, one GPU each
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

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


def replica_spec(cfg: DictConfig, settings: ServerSettings):
    """What each Ray Serve replica builds; relative corpus and index paths made absolute here, where they were
    given (a replica runs in another folder, possibly on another machine)."""
    from orthrus_rag.serving.replica import ReplicaSpec

    rag = settings.rag.model_copy(update={key: str(Path(value).resolve()) for key in ("corpus", "index_cache")
                                          if (value := getattr(settings.rag, key))})
    return ReplicaSpec(engine_config(cfg), rag if rag.enabled else None, embedder_name(cfg), pooling_params(cfg))


def run(cfg: DictConfig) -> None:
    settings = server_settings(cfg)
    if settings.rag.enabled:
        from orthrus_rag.serving.rag_service import check_pipelines  # imports the pipelines

        check_pipelines(settings.rag)
    if settings.host not in ("127.0.0.1", "localhost", "::1") and settings.api_key is None:
        log.warning("serving on %s without an API key: anyone who can reach it can use it", settings.host)
    if settings.replicas > 1:
        from orthrus_rag.cluster import import_ray

        import_ray()  # a clear error before anything loads when the `ray` extra is missing
        from orthrus_rag.serving.ray_serve import serve_on_ray

        return serve_on_ray(replica_spec(cfg, settings), settings)
    run_single(cfg, settings)


def run_single(cfg: DictConfig, settings: ServerSettings) -> None:
    """One engine in this process, under uvicorn."""
    from orthrus_rag.serving.app import create_app
    from orthrus_rag.serving.server import serve

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
