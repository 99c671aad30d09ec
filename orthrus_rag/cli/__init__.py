"""Command-line entry points (Hydra apps): orthrus-rag, orthrus-rag-index, orthrus-rag-bench, orthrus-rag-serve."""
