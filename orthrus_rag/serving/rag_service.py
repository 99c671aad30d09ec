"""The real RAG behind `/v1/rag`: a dense index over a corpus, the engine as retriever and reasoner, pipelines."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from indexes.build import engine_embedder, load_or_build
from indexes.corpus import load_corpus
from orthrus_rag.cli.common import default_index_folder
from orthrus_rag.demo import demo_corpus_path
from orthrus_rag.engine import AsyncEngine, PoolingParams
from orthrus_rag.rag import Answer, DenseRetriever, EngineReasoner, Pipeline
from orthrus_rag.serving.routes.rag import RagInputError
from orthrus_rag.serving.settings import RagSettings
from orthrus_rag.serving.state import RagFn


async def build_rag(engine: AsyncEngine, settings: RagSettings, embedder_name: str,
                    pooling: PoolingParams) -> RagFn:
    """Load (or build and cache) the index, build every configured pipeline, and return the `/v1/rag` callable."""
    from pipelines import build_pipeline  # the top-level pipelines package, installed with orthrus-rag

    corpus_path = Path(settings.corpus) if settings.corpus else demo_corpus_path()
    passages = load_corpus(corpus_path)
    folder = settings.index_cache or default_index_folder(corpus_path, passages, embedder_name)
    index = await load_or_build(folder, passages, engine_embedder(engine, pooling), embedder_name,
                                factory=settings.factory)
    retriever, reasoner = DenseRetriever(engine, index, pooling), EngineReasoner(engine)
    names = settings.pipelines or {settings.pipeline: {}}
    built = {name: build_pipeline(name, retriever, reasoner, **(extra or {})) for name, extra in names.items()}
    return _answerer(built, settings.pipeline)


def _answerer(pipelines: dict[str, Pipeline], default: str) -> RagFn:
    if default not in pipelines:
        raise ValueError(f"server.rag.pipeline {default!r} is not among server.rag.pipelines {sorted(pipelines)}")

    async def answer(question: str, pipeline: str | None) -> dict:
        name = pipeline or default
        if name not in pipelines:
            raise RagInputError(f"unknown pipeline {name!r}; this server runs {sorted(pipelines)}", "pipeline")
        return answer_dict(await pipelines[name].answer(question))

    return answer


def answer_dict(answer: Answer) -> dict:
    """An Answer as the `/v1/rag` response body."""
    trace = [{**dataclasses.asdict(e), "duration_s": e.duration_s} for e in answer.trace]
    return {"answer": answer.prediction, "passages": [dataclasses.asdict(p) for p in answer.passages],
            "trace": trace}

