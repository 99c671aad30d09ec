"""Evaluation: datasets, metrics, load generation, baselines, benchmarks and reports."""
