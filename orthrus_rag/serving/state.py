"""What the routes and middlewares share: the engine, settings, served model names, metrics, the RAG callable."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fastapi import Request

from orthrus_rag.rag.types import Answer
from orthrus_rag.serving.examples import Examples
from orthrus_rag.serving.metrics import ServerMetrics
from orthrus_rag.serving.served_engine import ServedEngine
from orthrus_rag.serving.settings import ServerSettings

RagFn = Callable[[str, "str | None"], Awaitable[Answer]]  # (question, pipeline name or None) -> the answer


@dataclass
class ServerState:
    engine: ServedEngine  # AsyncEngine, or the Ray Serve replicas' client
    settings: ServerSettings
    metrics: ServerMetrics
    generator_name: str
    embedder_name: str | None  # None when the engine embeds with the generator's own layers only
    rag: RagFn | None = None
    examples: Examples = field(default_factory=Examples)  # example questions with gold (the web page's picker)
    draining: bool = False  # set once shutdown begins: new requests get 503 (lifecycle.py)


def get_state(request: Request) -> ServerState:
    return request.app.state.server
