"""OpenAI-compatible HTTP serving of one AsyncEngine: embeddings, completions, chat, RAG, health and metrics."""
from orthrus_rag.serving.app import create_app
from orthrus_rag.serving.settings import EmbeddingSettings, RagSettings, ServerSettings

__all__ = ["EmbeddingSettings", "RagSettings", "ServerSettings", "create_app"]
