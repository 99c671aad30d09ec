"""Servers for the serving tests: the app under uvicorn in a background thread, on a free loopback port."""
from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from orthrus_rag.engine import AsyncEngine, EngineConfig
from orthrus_rag.rag import Answer, Passage
from orthrus_rag.serving import ServerSettings, create_app
from orthrus_rag.serving.errors import RagInputError
from orthrus_rag.serving.lifecycle import DrainingServer, make_server
from orthrus_rag.serving.state import ServerState

API_KEY = "test-key"


@dataclass
class Running:
    engine: AsyncEngine
    server: DrainingServer
    url: str  # http://127.0.0.1:PORT
    state: ServerState

    @property
    def api(self) -> str:
        return f"{self.url}/v1"


@contextlib.contextmanager
def serving(engine: AsyncEngine, settings: ServerSettings | None = None, rag=None, owns_engine: bool = False,
            send_buffer: int | None = None) -> Iterator[Running]:
    """Serve `create_app(engine, ...)` until the block ends; then shut the server down and wait for it.
    `send_buffer`: the kernel's send buffer of each connection, in bytes (None: the system's, which grows)."""
    settings = settings or ServerSettings()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer is not None:  # accepted connections inherit it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind(("127.0.0.1", 0))
    app = create_app(engine, settings, rag, owns_engine=owns_engine)
    server = make_server(app, settings.model_copy(update={"log_level": "warning"}))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    _wait(lambda: server.started or not thread.is_alive(), 30, "the test server did not start")
    try:
        yield Running(engine, server, f"http://127.0.0.1:{sock.getsockname()[1]}", app.state.server)
    finally:
        server.handle_exit(signal.SIGTERM, None)  # drains, as on SIGTERM
        thread.join(timeout=30)
        sock.close()


def _wait(condition, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(message)
        time.sleep(0.02)


def tiny_engine(tiny_llama_dir, tiny_encoder_dir, **runtime) -> AsyncEngine:
    config = EngineConfig(generator=str(tiny_llama_dir), embedder=str(tiny_encoder_dir), dtype="float32",
                          num_threads=1, **runtime)
    return AsyncEngine(config)


async def fake_rag(question: str, pipeline: str | None) -> Answer:
    """A stand-in RAG callable: echoes its input, fails on demand."""
    if question == "crash":
        raise RuntimeError("boom")
    if pipeline not in (None, "standard_rag", "ircot"):
        raise RagInputError(f"unknown pipeline {pipeline!r}", "pipeline")
    return Answer(question, f"{pipeline or 'default'}:{question}", [Passage("p1", "T", "some text", 1.0)])


@pytest.fixture(scope="session")
def engine(tiny_llama_dir, tiny_encoder_dir) -> Iterator[AsyncEngine]:
    eng = tiny_engine(tiny_llama_dir, tiny_encoder_dir)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="session")
def server(engine) -> Iterator[Running]:
    with serving(engine, ServerSettings(max_body_bytes=65536, default_max_tokens=16), rag=fake_rag) as running:
        yield running


@pytest.fixture(scope="session")
def keyed_server(engine) -> Iterator[Running]:
    with serving(engine, ServerSettings(api_key=API_KEY)) as running:
        yield running


@pytest.fixture(scope="session")
def serve_app():
    """`serve_app(engine, settings, rag, owns_engine, send_buffer)`: a context manager serving one more app."""
    return serving


@pytest.fixture(scope="session")
def make_engine(tiny_llama_dir, tiny_encoder_dir):
    """`make_engine(**runtime)`: a fresh tiny engine with runtime overrides (the caller shuts it down)."""
    return lambda **runtime: tiny_engine(tiny_llama_dir, tiny_encoder_dir, **runtime)


def rag_plan(config: EngineConfig, folder, pipelines: dict[str, dict]):
    """A stack plan over `config` for `/v1/rag`: dense retrieval over the demo corpus, its index in `folder`."""
    from orthrus_rag.indexes import load_corpus
    from orthrus_rag.demo import demo_corpus_path
    from orthrus_rag.rag.embedding import EmbeddingRecipe
    from orthrus_rag.retrieval import RetrievalSettings
    from orthrus_rag.index_plan import IndexSource
    from orthrus_rag.stack import StackPlan

    index = IndexSource(folder, load_corpus(demo_corpus_path()), "tiny-encoder", retrieval=RetrievalSettings("dense"))
    return StackPlan(config, EmbeddingRecipe(), index, {name: {"name": name, **group} for name, group in pipelines.items()})
