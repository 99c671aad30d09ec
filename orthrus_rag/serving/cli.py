"""`orthrus-rag-serve`: the HTTP server as a Hydra app (conf/serve.yaml).

    orthrus-rag-serve                                  # SmolLM2 + MiniLM on http://127.0.0.1:8000
    orthrus-rag-serve server.port=9000 runtime.dtype=float32
    orthrus-rag-serve model.name=/models/Llama-3-8B-Instruct embedder=backbone server.rag.enabled=false
    orthrus-rag-serve server.replicas=4 server.num_gpus=1         # 4 engines on Ray Serve, one GPU each
    orthrus-rag-serve model.endpoint=http://vllm:8000/v1          # /v1/rag's generation on another server
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError

from orthrus_rag.launch import launch
from orthrus_rag.serving.settings import EmbeddingSettings, ServerSettings
from orthrus_rag.settings import UserError
from orthrus_rag.stack import StackPlan

APP = "orthrus-rag-serve"
log = logging.getLogger("orthrus_rag.serving")
T = TypeVar("T")


def register_defaults() -> None:
    """ServerSettings' defaults as the config `server/server_defaults` that conf/server/default.yaml starts from, so
    each is written once (`embedding` comes from the `embedder` group: `server_settings`)."""
    node = ServerSettings().model_dump(exclude={"embedding"})
    ConfigStore.instance().store(group="server", name="server_defaults", node=node)


register_defaults()


def server_settings(cfg: DictConfig) -> ServerSettings:
    """The `server` group, with how `/v1/embeddings` pools from the `embedder` group; a wrong value is a UserError
    naming its key in its own group."""
    embedder = OmegaConf.to_container(cfg.embedder, resolve=True)
    embedding = _checked("embedder", EmbeddingSettings.model_validate,
                         {k: embedder[k] for k in ("pooling", "normalize", "model")})
    values = {**OmegaConf.to_container(cfg.server, resolve=True), "embedding": embedding}
    return _checked("server", ServerSettings.from_config, values)


def _checked(group: str, build: Callable[[dict], T], values: dict) -> T:
    """`build(values)`, its first validation error as a UserError naming the key under `group`."""
    try:
        return build(values)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in (group, *first["loc"]))
        raise UserError(f"{key}: {first['msg']}, got {first.get('input')!r}") from error


def stack_plan(cfg: DictConfig, settings: ServerSettings) -> StackPlan:
    """The engine and, when RAG is on, the `/v1/rag` pipelines and the index they search (the `index` group, as
    experiments use it), every setting checked before anything loads; a relative corpus is made absolute here,
    where it was given (a Ray replica runs in another folder, possibly on another machine)."""
    from hydra.utils import to_absolute_path

    from orthrus_rag.serving.rag_service import pipeline_groups

    rag = settings.rag
    corpus = to_absolute_path(rag.corpus) if rag.corpus else None
    plan = StackPlan.from_config(cfg, corpus, pipelines=pipeline_groups(rag) if rag.enabled else {})
    if plan.remote and not rag.enabled:
        raise UserError("model.endpoint and embedder.endpoint send /v1/rag's work to another server, and "
                        "server.rag.enabled is false: enable RAG or unset them (the OpenAI routes always serve this "
                        "server's own engine)")
    if plan.remote and settings.replicas > 1:
        raise UserError("model.endpoint and embedder.endpoint work with one replica: set server.replicas=1 or unset "
                        "them")
    return plan


def run(cfg: DictConfig) -> None:
    from orthrus_rag.serving.examples import Examples

    settings = server_settings(cfg)
    examples = Examples.load(settings.ui)
    plan = stack_plan(cfg, settings)
    if settings.host not in ("127.0.0.1", "localhost", "::1") and settings.api_key is None:
        log.warning("serving on %s without an API key: anyone who can reach it can use it", settings.host)
    if settings.replicas > 1:
        from orthrus_rag.cluster import import_ray

        import_ray()  # a clear error before anything loads when the `ray` extra is missing
        from orthrus_rag.serving.ray_serve import ReplicaSpec, serve_on_ray

        return serve_on_ray(ReplicaSpec(plan, settings.rag.pipeline if settings.rag.enabled else None), settings,
                            examples)
    from orthrus_rag.serving.app import create_app
    from orthrus_rag.serving.rag_service import build_rag
    from orthrus_rag.serving.lifecycle import serve

    engine = plan.start_local_engine()  # one engine in this process, under uvicorn; RAG's index is ready before serving
    try:
        rag_engine = plan.start_engine(local=engine)  # the pipelines' engine: this one, or model/embedder.endpoint
        rag = asyncio.run(build_rag(rag_engine, plan, settings.rag.pipeline)) if settings.rag.enabled else None
    except BaseException:
        engine.shutdown()
        raise
    serve(create_app(engine, settings, rag, examples=examples), settings)


def main() -> None:
    launch(APP, "serve", run)


if __name__ == "__main__":
    main()
