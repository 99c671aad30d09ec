"""The RAG stack from the Hydra config, in two calls that every entry point makes:

    plan = StackPlan.from_config(cfg, corpus)   # every setting checked, nothing loaded: a mistake fails at once
    stack = await plan.build(plan.start_engine())   # the index loaded (or built and cached), the pipelines built

It plans an index only when a pipeline retrieves (or the caller asks for one): the engine's and embedding's part
in engine_plan.py, the index's in index_plan.py, the pipelines' here."""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from orthrus_rag.engine import AsyncEngine, EngineConfig, EngineLike, InvalidRequestError
from orthrus_rag.engine_plan import embedding_recipe, endpoint_settings, engine_config
from orthrus_rag.index_plan import IndexSource, index_source, load_indexes
from orthrus_rag.models import ModelNotFoundError, load_tokenizer
from orthrus_rag.rag import EngineReasoner, Pipeline, Retriever
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.rag.remote import Endpoint, EndpointSettings, RemoteEngine, RemoteError
from orthrus_rag.retrieval import SearchIndexes, make_retriever
from orthrus_rag.settings import UserError, plain, user_errors


@dataclasses.dataclass
class Stack:
    """What a plan builds over an engine: the indexes and retriever (None when nothing retrieves) and the
    pipelines by name (`pipeline` is the first one: a run's only pipeline)."""

    indexes: SearchIndexes | None
    retriever: Retriever | None
    pipelines: dict[str, Pipeline]

    @property
    def pipeline(self) -> Pipeline:
        return next(iter(self.pipelines.values()))


@dataclasses.dataclass
class StackPlan:
    """Every part of a stack, checked, nothing loaded (see the module's docstring)."""

    engine: EngineConfig
    embedding: EmbeddingRecipe
    index: IndexSource | None  # None: no pipeline retrieves
    pipelines: dict[str, dict[str, Any]]  # name -> its `pipeline` group (`name` plus settings), checked
    generator_endpoint: EndpointSettings = EndpointSettings()  # model.endpoint and its settings
    embedder_endpoint: EndpointSettings = EndpointSettings()  # embedder.endpoint and its settings

    @classmethod
    def from_config(cls, cfg: DictConfig, corpus: Path | str | None = None,
                    pipelines: Mapping[str, Mapping[str, Any]] | None = None,
                    with_index: bool = False) -> StackPlan:
        """The plan for `cfg`. `pipelines`: name -> pipeline group (default: `cfg.pipeline`, when there is one);
        `corpus`: the passages file (None: the embedded demo corpus); `with_index`: plan the index even when no
        pipeline retrieves."""
        from orthrus_rag.pipelines import PIPELINES

        if pipelines is None:
            pipelines = {cfg.pipeline.name: cfg.pipeline} if cfg.get("pipeline") is not None else {}
        groups = {name: {"name": name, **plain(group)} for name, group in pipelines.items()}
        for group in groups.values():
            _make_pipeline(group, None, None)  # settings errors show before anything loads
        retrieves = any(PIPELINES[group["name"]].retrieves for group in groups.values())
        engine = engine_config(cfg)
        embedding = embedding_recipe(cfg, engine)
        index = index_source(cfg, corpus, engine) if retrieves or with_index else None
        return cls(engine, embedding, index, groups, endpoint_settings(cfg, "model"), endpoint_settings(cfg, "embedder"))

    @property
    def remote(self) -> bool:
        """Whether model.endpoint or embedder.endpoint sends a part of the work to another server."""
        return any(e.endpoint is not None for e in (self.generator_endpoint, self.embedder_endpoint))

    def sharing_cores(self, threads: int) -> StackPlan:
        """This plan with `threads` torch threads where runtime.num_threads is unset (an engine that shares the
        machine's cores with others: Ray workers and replicas)."""
        if self.engine.num_threads is not None:
            return self
        return dataclasses.replace(self, engine=dataclasses.replace(self.engine, num_threads=max(1, threads)))

    def start_engine(self, local: AsyncEngine | None = None) -> EngineLike:
        """The engine the pipelines run on: this process's (`local`, else `start_local_engine`), or, where
        model.endpoint or embedder.endpoint is set, a RemoteEngine that sends that part to its server (checked to
        answer and to serve the model) and the rest to the local engine, started only when one part has no
        endpoint and none is given."""
        if not self.remote:
            return local or self.start_local_engine()
        generator = Endpoint(self.generator_endpoint, self.engine.generator) \
            if self.generator_endpoint.endpoint else None
        embedder = Endpoint(self.embedder_endpoint, self.engine.embedder or self.engine.generator) \
            if self.embedder_endpoint.endpoint else None
        with user_errors(RemoteError):
            for endpoint in filter(None, (generator, embedder)):
                endpoint.check()
        if local is None and not (generator and embedder):
            local = self.start_local_engine()
        with user_errors(ModelNotFoundError, suffix=" (model.name: its tokenizer renders the prompts here)"):
            tokenizer = local.tokenizer if local is not None else load_tokenizer(self.engine.generator)
        return RemoteEngine(tokenizer, generator, embedder, local)

    def start_local_engine(self) -> AsyncEngine:
        """An AsyncEngine with the planned config; a missing model or a bad runtime value is a UserError."""
        print(f"loading {self.engine.generator} and {self.engine.embedder or 'backbone embeddings'} ...",
              file=sys.stderr)
        with user_errors(ModelNotFoundError, InvalidRequestError,
                         suffix=" (check model.name, embedder.name and runtime.*)"):
            return AsyncEngine(self.engine)

    async def build(self, engine: EngineLike | None, indexes: SearchIndexes | None = None) -> Stack:
        """The stack over `engine`: the planned indexes (`indexes` when given, else each cached in its folder when
        it matches, else built, the dense one through `engine.embed`), the retriever over them, and the
        pipelines, each with that retriever and a reasoner on `engine`."""
        if indexes is None and self.index is not None:
            indexes = await load_indexes(engine, self.index, self.embedding)
        retriever = make_retriever(engine, indexes, self.embedding) if indexes is not None else None
        reuse = self.engine.passage_reuse != "exact"
        reasoner = EngineReasoner(engine, passage_spans=reuse) if engine is not None else None
        built = {name: _make_pipeline(group, retriever, reasoner) for name, group in self.pipelines.items()}
        return Stack(indexes, retriever, built)


# ---- pipelines ------------------------------------------------------------------------------------------------
def _make_pipeline(group: Mapping[str, Any], retriever: Retriever | None, reasoner) -> Pipeline:
    """The pipeline a `pipeline` group names, with the group's other keys as its (checked) settings."""
    from orthrus_rag.pipelines import build_pipeline

    try:
        return build_pipeline(retriever=retriever, reasoner=reasoner, **group)
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, FileNotFoundError) as error:
        raise UserError(f"pipeline: {error.args[0] if error.args else error}") from error
