"""The rag workload: a pipeline answering the same questions, arriving at the same seeded times, in every mode
(eval/bench/README.md: workload=rag). Each mode's backend (eval/bench/backends.py) stands in for the engine under
`DenseRetriever` and `EngineReasoner`, so the pipeline code is the same everywhere.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tqdm import tqdm

from orthrus_rag.engine import AsyncEngine, EngineConfig, EngineLike, PoolingParams, SamplingParams
from orthrus_rag.stack import StackPlan

from ..experiment.run_info import environment
from ..load.arrivals import Load
from .metrics import Call
from .rag_metrics import RunData, headline, rag_ratios, summarize_run
from .runner import each_mode, engine_delta, mode_threads, on_fresh_backend, ran_dtype

WARMUP_TEMPLATE = "Which river flows through the town where warm-up person number {} was born?"


@dataclass
class RagWorkload:
    name: str = "rag"
    burstiness: float = 1.0
    clients: int = 8
    max_in_flight: int | None = None
    slo_s: float = 30.0
    warmup_questions: int = 2
    sample_interval_s: float = 0.25
    seed: int = 0

    def loads(self, rates: list[float | None]) -> list[Load]:
        """One load per rate (None: closed loop with `clients`), all with this workload's seed."""
        if not rates:
            raise ValueError("give at least one rate (or null for a closed loop)")
        return [Load(rate, self.burstiness, self.clients, self.max_in_flight, self.seed) for rate in rates]


@dataclass
class RagSetup:
    plan: StackPlan  # the engine config, embedding recipe, index and the one pipeline every mode runs
    questions: list  # list[orthrus_rag.eval.experiment.datasets.Question]
    workload: RagWorkload = field(default_factory=RagWorkload)


# ---- stand-in engine that logs every call -----------------------------------------------------------------------
class LoggedBackend:
    """A backend in the engine's place for DenseRetriever/EngineReasoner, logging each call's timing."""

    def __init__(self, backend: EngineLike):
        self.backend = backend
        self.calls: list[Call] = []

    @property
    def tokenizer(self):
        return self.backend.tokenizer

    async def embed(self, text: str, params: PoolingParams | None = None):
        sent = time.perf_counter()
        out = await self.backend.embed(text, params)
        self.calls.append(Call("embed", sent, time.perf_counter()))
        return out

    async def generate(self, prompt: str, params=None):
        sent = time.perf_counter()
        out = await self.backend.generate(prompt, params)
        done, first = time.perf_counter(), getattr(out.timings, "first_token", None)
        usage, n = out.usage, out.usage.completion_tokens
        self.calls.append(Call("generate", sent, done, first - sent if first is not None else None,
                               (done - first) / (n - 1) if first is not None and n > 1 else None, n,
                               usage.prompt_tokens, getattr(usage, "cached_tokens", 0),
                               getattr(usage, "reused_tokens", 0), getattr(usage, "recomputed_tokens", 0)))
        return out

    def stats(self) -> dict:
        return self.backend.stats()

    def take(self) -> list[Call]:
        calls, self.calls = self.calls, []
        return calls


@contextlib.asynccontextmanager
async def sampled(backend: EngineLike, interval: float):
    """Engine counters every `interval` seconds while a run is in flight, and once more at its end: yields the list
    of (seconds since start, snapshot) it fills."""
    samples: list[tuple[float, dict]] = []
    start = time.perf_counter()

    async def every_interval() -> None:
        while True:
            samples.append((time.perf_counter() - start, await asyncio.to_thread(backend.stats)))
            await asyncio.sleep(interval)

    task = asyncio.create_task(every_interval())
    try:
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        samples.append((time.perf_counter() - start, await asyncio.to_thread(backend.stats)))


# ---- the index ------------------------------------------------------------------------------------------------
class _LazyEngine:
    """Starts an AsyncEngine only if something is embedded (the index was not cached)."""

    def __init__(self, config: EngineConfig):
        self.config, self.engine = config, None

    async def embed(self, text: str, params: PoolingParams):
        if self.engine is None:
            tqdm.write("building the index through the engine ...")
            self.engine = AsyncEngine(self.config)
        return await self.engine.embed(text, params)

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()


def shared_index(setup: RagSetup) -> Any:
    """The index every mode searches: loaded from its folder, or built through an engine and saved there."""
    engine = _LazyEngine(setup.plan.engine)
    try:
        return asyncio.run(setup.plan.build(engine)).indexes
    finally:
        engine.shutdown()


# ---- one mode ---------------------------------------------------------------------------------------------------
async def run_load(mode: str, backend: Any, setup: RagSetup, index: Any, load: Load) -> RunData:
    """Warm-up questions (untimed), then every question under `load`, with calls logged and counters sampled."""
    logged = LoggedBackend(backend)
    pipeline = (await setup.plan.build(logged, index)).pipeline
    texts = [q.question for q in setup.questions]
    if setup.workload.warmup_questions:
        warmup = [WARMUP_TEMPLATE.format(i + 1) for i in range(setup.workload.warmup_questions)]
        await pipeline.run(warmup, concurrency=None, progress=False)
        logged.take()
    tqdm.write(f"{mode}: {len(texts)} questions, {load.label}")
    before = await backend.settled_stats()
    async with sampled(backend, setup.workload.sample_interval_s) as samples:
        start = time.perf_counter()
        answers = await pipeline.run(texts, concurrency=load.concurrency(), arrivals=load.arrivals(len(texts)))
        wall = time.perf_counter() - start
    engine = engine_delta(await backend.settled_stats(), before)
    return RunData(mode, load, answers, wall, logged.take(), samples, engine)


def run_rag_bench(setup: RagSetup, rates: list[float | None], modes: list[str]) -> dict:
    """Every mode on the same questions and arrival times; returns the bench.json dictionary (workload rag).
    Each (mode, load) gets a fresh backend, so no load finds the previous one's prompts in the prefix cache."""
    loads = setup.workload.loads(rates)
    index = shared_index(setup)
    summaries: dict[str, dict[str, dict]] = {load.label: {} for load in loads}

    def every_load(mode: str) -> None:
        for load in loads:
            # the pipelines pass their own sampling and embedding params
            run = on_fresh_backend(mode, setup.plan.engine, SamplingParams(), setup.plan.embedding.params,
                                   lambda backend: run_load(mode, backend, setup, index, load))
            summaries[load.label][mode] = summarize_run(run, setup.questions, setup.workload.slo_s)

    ran, skipped = each_mode(modes, every_load)
    return {**assemble(summaries, loads, setup, list(ran)), **skipped}


# ---- bench.json -------------------------------------------------------------------------------------------------
def assemble(summaries: dict[str, dict[str, dict]], loads: list[Load], setup: RagSetup, modes: list[str]) -> dict:
    """bench.json for the rag workload: every load in `sweep`; `modes`, `ratios` and `headline` from `headline`."""
    sweep = [{"load": load.label, "rate": load.rate, "modes": summaries[load.label],
              "ratios": rag_ratios(summaries[load.label])} for load in loads]
    plan = setup.plan
    return {"workload": "rag", **headline(sweep), "sweep": sweep,
            "config": {"modes": modes, "pipeline": next(iter(plan.pipelines.values())),
                       "questions": len(setup.questions), "workload": asdict(setup.workload),
                       "loads": [asdict(load) for load in loads], "engine": asdict(plan.engine),
                       "dtype": ran_dtype(plan.engine), "embedding": asdict(plan.embedding),
                       "index": ({"folder": str(plan.index.folder), "factory": plan.index.factory}
                                 if plan.index else None),
                       "threads": {m: mode_threads(plan.engine, m) for m in modes}},
            "run": environment()}
