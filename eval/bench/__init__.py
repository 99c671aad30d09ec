"""Side-by-side benchmarks of serving modes (hetero, isolated, alternating, hf) on controlled embed/generate
mixes. `orthrus-rag-bench` (eval/bench/cli.py) runs them from the Hydra config and writes bench.json."""
from eval.bench.metrics import ModeResult, Record, percentile, ratios, summarize
from eval.bench.runner import MODES, Phase, Workload, format_table, run_bench
from eval.bench.workload import Request, make_requests

__all__ = ["MODES", "ModeResult", "Phase", "Record", "Request", "Workload", "format_table", "make_requests",
           "percentile", "ratios", "run_bench", "summarize"]
