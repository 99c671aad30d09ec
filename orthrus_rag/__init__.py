"""Orthrus-RAG: iterative RAG with one inference loop for embedding and generation."""

__version__ = "0.1.0"
