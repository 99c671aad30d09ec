"""`create_app`: the FastAPI application in front of one AsyncEngine."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI

from orthrus_rag.engine import AsyncEngine
from orthrus_rag.serving.auth import require_api_key
from orthrus_rag.serving.body_limit import BodyLimitMiddleware
from orthrus_rag.serving.disconnect import DisconnectMiddleware
from orthrus_rag.serving.errors import install_error_handlers
from orthrus_rag.serving.lifecycle import DrainingMiddleware
from orthrus_rag.serving.limits import LimitsMiddleware
from orthrus_rag.serving.metrics import MetricsMiddleware, ServerMetrics
from orthrus_rag.serving.examples import Examples
from orthrus_rag.serving.openapi import API_ERRORS, install_openapi
from orthrus_rag.serving.routes import chat, completions, embeddings, system
from orthrus_rag.serving.routes import rag as rag_route
from orthrus_rag.serving.routes.web import install_web
from orthrus_rag.serving.settings import ServerSettings, served_name
from orthrus_rag.serving.state import RagFn, ServerState


def create_app(engine: AsyncEngine, settings: ServerSettings | None = None, rag: RagFn | None = None, *,
               examples: Examples | None = None, owns_engine: bool = True) -> FastAPI:
    """The app; on shutdown (after in-flight requests finish) it shuts the engine down when it `owns_engine`.
    `examples`: the web page's example questions, already loaded (None: loaded here, as `settings.ui` says)."""
    settings = settings or ServerSettings()
    cfg = engine.config
    generator = settings.served_model_name or served_name(cfg.generator)
    embedder = (settings.served_embedder_name or served_name(cfg.embedder)) if cfg.embedder else None
    state = ServerState(engine, settings, ServerMetrics(engine), generator, embedder, rag,
                        Examples.load(settings.ui) if examples is None else examples)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        state.draining = True
        if owns_engine:  # finishes whatever is still in flight, off the event loop so streams keep flowing
            await asyncio.to_thread(state.engine.shutdown)

    app = FastAPI(title="Orthrus-RAG", lifespan=lifespan)
    app.state.server = state
    install_error_handlers(app)
    guarded = [Depends(require_api_key)]
    for module in (embeddings, completions, chat):
        app.include_router(module.router, dependencies=guarded, responses=API_ERRORS)
    app.include_router(rag_route.router, dependencies=guarded)
    app.include_router(system.router)
    if settings.ui.enabled:
        install_web(app)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(DisconnectMiddleware)  # inside the metrics: an abandoned request is counted as 499
    app.add_middleware(LimitsMiddleware, timeout_s=settings.request_timeout_s,
                       max_per_key=settings.max_concurrent_per_key, api_key=settings.api_key)
    app.add_middleware(DrainingMiddleware, state=state)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    install_openapi(app)
    return app

