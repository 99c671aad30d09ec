"""Side-by-side benchmarks of serving modes (hetero, isolated, alternating, hf) on controlled embed/generate
mixes. `orthrus-rag-bench` (eval/bench/cli.py) runs them from the Hydra config and writes bench.json."""
from eval.bench.runner import MODES, Phase, Workload, format_table, run_bench

__all__ = ["MODES", "Phase", "Workload", "format_table", "run_bench"]
