"""Side-by-side benchmarks of serving modes (hetero, isolated, alternating, hf) on controlled embed/generate
mixes. `orthrus-rag-bench` (eval/bench/cli.py) runs them from the Hydra config and writes bench.json."""
