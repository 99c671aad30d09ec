"""Pipelines, one file and one class each, registered here by name."""
from __future__ import annotations

import inspect

from orthrus_rag.rag import Pipeline, Reasoner, Retriever
from pipelines.ircot import IRCoT
from pipelines.iter_retgen import IterRetGen
from pipelines.no_retrieval import NoRetrieval
from pipelines.self_ask import SelfAsk
from pipelines.standard_rag import StandardRAG

PIPELINES: dict[str, type[Pipeline]] = {
    "no_retrieval": NoRetrieval,
    "standard_rag": StandardRAG,
    "ircot": IRCoT,
    "iter_retgen": IterRetGen,
    "self_ask": SelfAsk,
}


def build_pipeline(name: str, retriever: Retriever | None, reasoner: Reasoner, **settings: object) -> Pipeline:
    """The pipeline registered as `name`, built with its own keyword settings."""
    if name not in PIPELINES:
        raise KeyError(f"unknown pipeline {name!r}; known: {sorted(PIPELINES)}")
    cls = PIPELINES[name]
    known = [p for p in inspect.signature(cls).parameters if p not in ("retriever", "reasoner")]
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise TypeError(f"pipeline {name!r} has no setting(s) {unknown}; its settings are {known}")
    return cls(retriever, reasoner, **settings)


__all__ = ["PIPELINES", "IRCoT", "IterRetGen", "NoRetrieval", "SelfAsk", "StandardRAG", "build_pipeline"]
