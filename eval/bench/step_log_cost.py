"""What the engine's step log (GET /v1/engine/steps, the web page's engine view) costs: the time spent building and
appending one step's record, against the time of the step itself, on the shipped models under full load.

    python -m orthrus_rag.eval.bench.step_log_cost                      # 48 generations and 96 embeddings at once
    python -m orthrus_rag.eval.bench.step_log_cost --requests 16 --dtype float32

Prints the median and p99 record time, the median step time, and their ratio.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from orthrus_rag.demo import demo_corpus_path
from orthrus_rag.engine import EngineConfig, LLMEngine, PoolingParams, SamplingParams

from .metrics import percentile

PROMPT_WORDS = 150


def timed(fn: Callable, into: list[float]) -> Callable:
    def wrapper(*args):
        start = time.perf_counter()
        result = fn(*args)
        into.append(time.perf_counter() - start)
        return result
    return wrapper


def run(requests: int, max_tokens: int, dtype: str) -> dict:
    engine = LLMEngine(EngineConfig(dtype=dtype, step_log_size=4096))
    built: list[float] = []
    stored: list[float] = []
    engine._step_record = timed(engine._step_record, built)  # building one step's record ...
    engine.step_log.append = timed(engine.step_log.append, stored)  # ... and storing it
    lines = demo_corpus_path().read_text(encoding="utf-8").splitlines()
    texts = [lines[i % len(lines)] for i in range(2 * requests)]
    for i in range(requests):
        prompt = " ".join(" ".join(texts[i:i + 3]).split()[:PROMPT_WORDS])
        engine.add_request(f"g{i}", prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    for i, text in enumerate(texts):
        engine.add_request(f"e{i}", text, PoolingParams())
    while engine.has_unfinished():
        engine.step()
    steps = [r.step_s for r in engine.step_log.since()]
    per_step = [a + b for a, b in zip(built, stored)]
    return {"steps": len(steps), "record_median_us": 1e6 * statistics.median(per_step),
            "record_p99_us": 1e6 * percentile(per_step, 99),
            "step_median_ms": 1e3 * statistics.median(steps), "step_min_ms": 1e3 * min(steps),
            "share_of_median_step": statistics.median(per_step) / statistics.median(steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=48, help="generations at once (and twice as many embeddings)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()
    result = run(args.requests, args.max_tokens, args.dtype)
    print(f"{result['steps']} steps: record median {result['record_median_us']:.1f} us (p99 "
          f"{result['record_p99_us']:.1f} us), step median {result['step_median_ms']:.1f} ms (fastest "
          f"{result['step_min_ms']:.1f} ms): the record is {100 * result['share_of_median_step']:.4f}% of a median step")


if __name__ == "__main__":
    main()
