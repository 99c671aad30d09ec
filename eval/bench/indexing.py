"""Corpus indexing against prefill (`orthrus-rag-bench workload=indexing`): one engine, the same passages embedded
as `orthrus-rag-index` embeds them (`index`) and prefilled as generate prompts with `max_tokens=1` (`prefill`);
the runs and bench.json: eval/bench/README.md (workload=indexing). The target: `index/prefill` >= 0.8 with
`embedder=backbone`.
"""
from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import asdict, dataclass

from orthrus_rag.engine import AsyncEngine, EngineConfig, SamplingParams
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.rag.types import Passage
from orthrus_rag.settings import UserError, plain, typed

from ..experiment.markdown import markdown_table


@dataclass
class IndexingWorkload:
    name: str = "indexing"
    passages: int = 256  # the corpus's first N passages
    rounds: int = 3  # index and prefill runs each; the median is reported


async def _prefill_all(engine: AsyncEngine, texts: list[str], in_flight: int) -> None:
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    for start in range(0, len(texts), in_flight):
        await asyncio.gather(*(engine.generate(t, params) for t in texts[start:start + in_flight]))


async def measure(config: EngineConfig, embedding: EmbeddingRecipe, passages: list[Passage], batch_size: int,
                  rounds: int) -> list[dict]:
    """`rounds` pairs of (index, prefill) runs over `passages`, each on a fresh engine (cold prefix cache)."""
    from orthrus_rag.indexes.build import embed_passages, engine_embedder

    results = []
    for r in range(rounds):
        order = ["index", "prefill"] if r % 2 == 0 else ["prefill", "index"]
        result = {}
        for name in order:
            async with AsyncEngine(config) as engine:
                if name == "index":
                    work, kind = embed_passages(passages, engine_embedder(engine, embedding), batch_size), "embed"
                else:
                    work, kind = _prefill_all(engine, _prompts(engine, passages, embedding), batch_size), "prefill"
                before, start = engine.stats(), time.perf_counter()
                await work
                wall, after = time.perf_counter() - start, engine.stats()
                tokens = after["tokens"][kind] - before["tokens"][kind]
                result[name] = {"tokens": tokens, "wall_s": round(wall, 3), "tok_s": round(tokens / wall, 1),
                                "steps": after["steps"] - before["steps"]}
        results.append(result)
    return results


def _prompts(engine, passages: list[Passage], embedding: EmbeddingRecipe) -> list:
    """The prefill side's prompts: each passage as the index embeds it (the passage prefix first, and only its first
    `passage_max_tokens` token ids when the index cuts passages there), so both sides compute the same tokens."""
    texts = [embedding.passage_prefix + p.formatted() for p in passages]
    cut = embedding.passage_max_tokens
    return [engine.tokenizer.encode(t)[:cut] for t in texts] if cut else texts


def summarise(rounds: list[dict]) -> dict:
    index = statistics.median(r["index"]["tok_s"] for r in rounds)
    prefill = statistics.median(r["prefill"]["tok_s"] for r in rounds)
    return {"index_tok_s": index, "prefill_tok_s": prefill, "index/prefill": round(index / prefill, 3)}


def format_indexing_table(bench: dict) -> str:
    header = ["round", "index tok/s", "prefill tok/s", "index/prefill", "index steps", "prefill steps"]
    rows = [[i, f"{r['index']['tok_s']:,.0f}", f"{r['prefill']['tok_s']:,.0f}",
             f"{r['index']['tok_s'] / r['prefill']['tok_s']:.2f}", r["index"]["steps"], r["prefill"]["steps"]]
            for i, r in enumerate(bench["rounds"], 1)]
    m = bench["median"]
    return (markdown_table(header, rows)
            + f"\n| median | {m['index_tok_s']:,.0f} | {m['prefill_tok_s']:,.0f} | {m['index/prefill']:.2f} | | |")


def indexing_bench(cfg) -> dict:
    """bench.json's dictionary for the Hydra config (the CLI writes it and prints `format_indexing_table`)."""
    from hydra.utils import to_absolute_path

    from orthrus_rag.stack import StackPlan

    from ..experiment.run_info import environment

    workload = typed(IndexingWorkload, cfg.workload, "workload")
    plan = StackPlan.from_config(cfg, to_absolute_path(cfg.corpus), pipelines={}, with_index=True)
    if workload.passages < 1 or workload.rounds < 1 or plan.index.batch_size < 1:
        raise UserError("workload.passages, workload.rounds and index.batch_size must be >= 1")
    passages = plan.index.passages[:workload.passages]
    if not passages:
        raise UserError(f"the corpus {cfg.corpus} holds no passages")
    rounds = asyncio.run(measure(plan.engine, plan.embedding, passages, plan.index.batch_size, workload.rounds))
    return {"workload": "indexing", "rounds": rounds, "median": summarise(rounds),
            "config": {"workload": asdict(workload), "corpus": cfg.corpus, "index": plain(cfg.index),
                       "engine": asdict(plan.engine), "embedding": asdict(plan.embedding)},
            "run": environment()}
