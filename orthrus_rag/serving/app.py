"""`create_app`: the FastAPI application in front of one engine (a ServedEngine: an AsyncEngine or Ray Serve's
replicas)."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from orthrus_rag.serving.auth import AuthMiddleware
from orthrus_rag.serving.body_limit import BodyLimitMiddleware
from orthrus_rag.serving.disconnect import DisconnectMiddleware
from orthrus_rag.serving.errors import install_error_handlers
from orthrus_rag.serving.hosts import HostCheckMiddleware, default_hosts
from orthrus_rag.serving.lifecycle import AvailabilityMiddleware
from orthrus_rag.serving.limits import LimitsMiddleware
from orthrus_rag.serving.metrics import MetricsMiddleware, ServerMetrics
from orthrus_rag.serving.examples import Examples
from orthrus_rag.serving.openapi import API_ERRORS, install_openapi
from orthrus_rag.serving.served_engine import ServedEngine
from orthrus_rag.serving.routes import chat, completions, embeddings, system
from orthrus_rag.serving.routes import rag as rag_route
from orthrus_rag.serving.routes.web import install_web
from orthrus_rag.serving.settings import ServerSettings, served_name
from orthrus_rag.serving.state import RagFn, ServerState


def create_app(engine: ServedEngine, settings: ServerSettings | None = None, rag: RagFn | None = None, *,
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
    for module in (embeddings, completions, chat):
        app.include_router(module.router, responses=API_ERRORS)
    app.include_router(rag_route.router)
    app.include_router(system.router)
    if settings.ui.enabled:
        install_web(app)
    # innermost first: each middleware added wraps those before it, so a request meets them in the reverse order
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(DisconnectMiddleware, write_timeout_s=settings.stream_write_timeout_s)  # an abandoned
    # request is counted as 499 by the metrics outside it
    app.add_middleware(LimitsMiddleware, timeout_s=settings.request_timeout_s,
                       max_per_key=settings.max_concurrent_per_key, api_key=settings.api_key)
    app.add_middleware(AvailabilityMiddleware, state=state)
    app.add_middleware(AuthMiddleware, api_key=settings.api_key, metrics_public=settings.metrics_public,
                       ui_public=settings.ui.public)  # from the headers alone: before any body is read
    app.add_middleware(HostCheckMiddleware, hosts=settings.allowed_hosts or default_hosts(settings.host))
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    install_openapi(app)
    return app

