"""Command-line entry points (Hydra apps): orthrus-rag (run.py), orthrus-rag-index, orthrus-rag-train-adapter;
orthrus-rag-serve is orthrus_rag/serving/cli.py, orthrus-rag-bench eval/bench/cli.py."""
