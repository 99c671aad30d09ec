"""The Retriever-Reasoner API: the types and interfaces pipelines speak."""
