"""The real RAG behind `/v1/rag`: the stack (orthrus_rag.stack) over the server's engine, one pipeline per entry."""
from __future__ import annotations

from pathlib import Path

from orthrus_rag.demo import demo_corpus_path
from orthrus_rag.engine import EngineLike, PoolingParams
from orthrus_rag.rag import Answer, Pipeline
from orthrus_rag.serving.errors import RagInputError
from orthrus_rag.serving.settings import RagSettings
from orthrus_rag.serving.state import RagFn
from orthrus_rag.stack import IndexSpec, index_source, load_index, make_pipeline, rag_pipeline


async def build_rag(engine: EngineLike, settings: RagSettings, embedder_name: str,
                    pooling: PoolingParams) -> RagFn:
    """Load (or build and cache) the index, build every configured pipeline, and return the `/v1/rag` callable.
    `settings.pipelines` maps the name a request uses to a `pipeline` group entry (its `name` defaults to it)."""
    corpus = Path(settings.corpus) if settings.corpus else demo_corpus_path()
    source = index_source(IndexSpec(settings.factory, settings.index_cache, retrieval=settings.retrieval,
                                    rrf_k=settings.rrf_k, candidates=settings.candidates), corpus, embedder_name,
                          getattr(pooling, "dtype", None))
    index = await load_index(engine, source, pooling)
    built = {key: rag_pipeline(group, engine, index, pooling) for key, group in pipeline_groups(settings).items()}
    return _answerer(built, settings.pipeline)


def pipeline_groups(settings: RagSettings) -> dict[str, dict]:
    """The request name of each pipeline served -> its `pipeline` group entry (`name` defaults to the key)."""
    entries = settings.pipelines or {settings.pipeline: {}}
    return {key: {"name": key, **entry} for key, entry in entries.items()}


def check_pipelines(settings: RagSettings) -> None:
    """Every served pipeline's settings, checked before any model loads (a mistake is a UserError)."""
    for group in pipeline_groups(settings).values():
        make_pipeline(group, None, None)


def _answerer(pipelines: dict[str, Pipeline], default: str) -> RagFn:
    if default not in pipelines:
        raise ValueError(f"server.rag.pipeline {default!r} is not among server.rag.pipelines {sorted(pipelines)}")

    async def answer(question: str, pipeline: str | None) -> Answer:
        name = pipeline or default
        if name not in pipelines:
            raise RagInputError(f"unknown pipeline {name!r}; this server runs {sorted(pipelines)}", "pipeline")
        return await pipelines[name].answer(question)

    answer.pipelines = pipelines  # the /v1/rag route copies one with a request's own settings (k, max_steps)
    return answer
