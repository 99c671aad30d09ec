"""The Retriever-Reasoner API: the types and interfaces pipelines speak."""
from orthrus_rag.rag.answer import clean_answer, extract_answer, find_answer
from orthrus_rag.rag.pipeline import Pipeline
from orthrus_rag.rag.reasoner import EngineReasoner, Message, Prompt, Reasoner, Reasoning
from orthrus_rag.rag.retriever import DenseRetriever, Retrieval, Retriever
from orthrus_rag.rag.types import Answer, Passage, TraceEvent

__all__ = ["Answer", "DenseRetriever", "EngineReasoner", "Message", "Passage", "Pipeline", "Prompt", "Reasoner",
           "Reasoning", "Retrieval", "Retriever", "TraceEvent", "clean_answer", "extract_answer", "find_answer"]
