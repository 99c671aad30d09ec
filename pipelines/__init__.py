"""Pipelines, one file and one class each, registered here by name."""
from __future__ import annotations

from orthrus_rag.rag import Pipeline, Reasoner, Retriever
from orthrus_rag.settings import check_settings

from .ircot import IRCoT
from .iter_retgen import IterRetGen
from .no_retrieval import NoRetrieval
from .self_ask import SelfAsk
from .standard_rag import StandardRAG

PIPELINES: dict[str, type[Pipeline]] = {
    "no_retrieval": NoRetrieval,
    "standard_rag": StandardRAG,
    "ircot": IRCoT,
    "iter_retgen": IterRetGen,
    "self_ask": SelfAsk,
}


def build_pipeline(name: str, retriever: Retriever | None, reasoner: Reasoner | None,
                   **settings: object) -> Pipeline:
    """The pipeline registered as `name`, built with its own keyword settings (checked: `SettingError`)."""
    if name not in PIPELINES:
        raise KeyError(f"unknown pipeline {name!r}; known: {sorted(PIPELINES)}")
    check_settings(PIPELINES[name], settings, "pipeline", skip=("retriever", "reasoner"))
    return PIPELINES[name](retriever, reasoner, **settings)


__all__ = ["PIPELINES", "IRCoT", "IterRetGen", "NoRetrieval", "SelfAsk", "StandardRAG", "build_pipeline"]
