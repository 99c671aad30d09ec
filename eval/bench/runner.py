"""Run the modes side by side on the same requests and collect bench.json (closed loop, phases and warm-up:
eval/bench/README.md). Throughput is finished requests over the wall time from the first send to the last answer;
latency is per request, as the client saw it.
"""
from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from orthrus_rag.engine import EngineConfig, PoolingParams, SamplingParams
from orthrus_rag.models import resolve_dtype, usable_cores

from ..experiment.markdown import cell
from ..experiment.run_info import environment
from .backends import EngineBackend, HFBackend, IsolatedBackend, ModeUnavailable
from .metrics import DEFAULT_MODES, MODES, Call, counter_delta, ratios, summarize
from .vllm_peer import VLLMBackend
from .workload import Request, make_requests


@dataclass
class Phase:
    name: str
    embed_share: float


@dataclass
class Workload:
    name: str = "mixed"
    clients: int = 8
    requests: int = 96  # per phase and mode
    phases: list[Phase] = field(default_factory=lambda: [Phase("mixed", 0.5)])
    gen_prompt_tokens: int = 128
    embed_tokens: int = 64
    max_tokens: int = 32
    warmup_requests: int = 8
    seed: int = 0


def mode_threads(config: EngineConfig, mode: str) -> int:
    """torch threads of a mode's engine: runtime.num_threads, else every core; `isolated` and `vllm` split them in
    two (vLLM binds its servers to the cores themselves: eval/bench/vllm_peer.py)."""
    threads = config.num_threads or usable_cores()
    return max(1, threads // 2) if mode in ("isolated", "vllm") else threads


def run_folder() -> Path:
    """Where a mode's own files go (the vLLM servers' logs): the Hydra run folder, else the current one."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else Path.cwd()


def on_fresh_backend(mode: str, config: EngineConfig, sampling: SamplingParams, pooling: PoolingParams,
                     work: Callable[[Any], Awaitable]) -> Any:
    """`asyncio.run(work(backend))` on a new backend of `mode`, closed and its models freed before returning."""
    backends = {"hetero": lambda: EngineBackend(config, sampling, pooling),
                "alternating": lambda: EngineBackend(replace(config, policy="alternating"), sampling, pooling),
                "isolated": lambda: IsolatedBackend(config, sampling, pooling, threads=mode_threads(config, mode)),
                "hf": lambda: HFBackend(config, sampling, pooling),
                "vllm": lambda: VLLMBackend(config, sampling, pooling, shared=False, logs=run_folder()),
                "vllm_shared": lambda: VLLMBackend(config, sampling, pooling, shared=True, logs=run_folder())}
    if mode not in backends:
        raise ValueError(f"unknown mode {mode!r}; choose from {MODES}")
    backend = backends[mode]()
    try:
        return asyncio.run(work(backend))
    finally:
        backend.close()
        del backend
        gc.collect()


async def closed_loop(backend, requests: list[Request], clients: int, desc: str) -> tuple[list[Call], float]:
    pending = iter(requests)
    records: list[Call] = []
    bar = tqdm(total=len(requests), desc=desc, unit="req", leave=False)

    async def client() -> None:
        for request in pending:  # a shared iterator: each free client takes the next request
            sent = time.perf_counter()
            await (backend.embed(request.text) if request.kind == "embed" else backend.generate(request.text))
            records.append(Call(request.kind, sent, time.perf_counter()))
            bar.update()

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - start
    bar.close()
    return records, wall


@dataclass
class PhaseRun:
    records: list[Call]
    wall_s: float
    engine: dict  # engine counters over this phase


async def run_mode(mode: str, backend, phases: dict[str, list[Request]], warmup: list[Request],
                   clients: int) -> dict[str, PhaseRun]:
    if warmup:
        await closed_loop(backend, warmup, clients, f"{mode} warm-up")
    runs = {}
    for name, requests in phases.items():
        before = await backend.settled_stats()
        records, wall = await closed_loop(backend, requests, clients, f"{mode} {name}")
        runs[name] = PhaseRun(records, wall, engine_delta(await backend.settled_stats(), before))
    return runs


def engine_delta(after: dict, before: dict) -> dict:
    if after and all(isinstance(v, dict) and "steps" in v for v in after.values()):  # isolated: one per process
        return {kind: counter_delta(after[kind], before[kind]) for kind in after}
    return counter_delta(after, before)


def run_bench(config: EngineConfig, pooling: PoolingParams, workload: Workload,
              modes: list[str] | tuple[str, ...] = DEFAULT_MODES) -> dict:
    """Every mode on the same requests; returns the bench.json dictionary."""
    sampling = SamplingParams(max_tokens=workload.max_tokens, ignore_eos=True)
    phases = {phase.name: make_requests(workload.requests, phase.embed_share, workload.seed + i,
                                        workload.gen_prompt_tokens, workload.embed_tokens)
              for i, phase in enumerate(workload.phases)}
    warmup = make_requests(workload.warmup_requests, 0.5, workload.seed + 1000, workload.gen_prompt_tokens,
                           workload.embed_tokens)
    per_mode, skipped = each_mode(modes, lambda mode: on_fresh_backend(
        mode, config, sampling, pooling, lambda backend: run_mode(mode, backend, phases, warmup, workload.clients)))
    return {**assemble(per_mode, workload, config, pooling, sampling, list(per_mode)), **skipped}


def each_mode(modes: list[str] | tuple[str, ...], run_one: Callable[[str], Any]) -> tuple[dict[str, Any], dict]:
    """`run_one(mode)` for each mode, and `{"skipped": {mode: why}}` for those that cannot run here (printed as one
    line each; the others still run), or {} when none was skipped."""
    done, skipped = {}, {}
    for mode in modes:
        try:
            done[mode] = run_one(mode)
        except ModeUnavailable as error:
            tqdm.write(f"{mode}: skipped: {error}")
            skipped[mode] = str(error)
    return done, {"skipped": skipped} if skipped else {}


def assemble(per_mode: dict[str, dict[str, PhaseRun]], workload: Workload, config: EngineConfig,
             pooling: PoolingParams, sampling: SamplingParams, modes: list[str]) -> dict:
    """bench.json (layout: eval/bench/README.md); with several phases the top level counts all of them together."""
    bench: dict = {"workload": workload.name}
    overall = {}
    for mode, runs in per_mode.items():
        records = [r for run in runs.values() for r in run.records]
        engine = next(iter(runs.values())).engine if len(runs) == 1 else {n: run.engine for n, run in runs.items()}
        overall[mode] = summarize(mode, records, sum(run.wall_s for run in runs.values()), engine)
    if len(workload.phases) > 1:
        bench["phases"] = {}
        for phase in workload.phases:
            results = {m: summarize(m, runs[phase.name].records, runs[phase.name].wall_s, runs[phase.name].engine)
                       for m, runs in per_mode.items()}
            bench["phases"][phase.name] = {"embed_share": phase.embed_share, "modes": results,
                                           "ratios": ratios(results)}
    config_facts = {"modes": modes, "workload": asdict(workload), "engine": asdict(config), "dtype": ran_dtype(config),
                    "pooling": asdict(pooling), "sampling": asdict(sampling),
                    "threads": {m: mode_threads(config, m) for m in modes}}
    return {**bench, "modes": overall, "ratios": ratios(overall), "config": config_facts, "run": environment()}


def ran_dtype(config: EngineConfig) -> str:
    """The dtype the engine ran in (`auto` resolved for this machine)."""
    return str(resolve_dtype(config.dtype, config.device)).removeprefix("torch.")


def format_table(bench: dict) -> str:
    """The printed summary: one table for the whole run, then one per phase when there are several."""
    sections = [("all" if "phases" in bench else bench["workload"], bench)]
    sections += [(f"phase {name} (embed share {p['embed_share']})", p) for name, p in bench.get("phases", {}).items()]
    lines = []
    for title, section in sections:
        lines += [f"== {bench['workload']}: {title}", f"{'mode':<12}{'rps':>7}{'embed/s':>9}{'gen/s':>8}{'p50 emb':>9}"
                  f"{'p99 emb':>9}{'p50 gen':>9}{'p99 gen':>9}{'n':>6}{'wall s':>8}"]
        for mode, r in section["modes"].items():
            latency = "".join(f"{cell(r[q][kind], 3):>9}" for kind in ("embed", "generate") for q in ("p50_s", "p99_s"))
            lines.append(f"{mode:<12}{r['rps']:>7.2f}{r['embed_rps']:>9.2f}{r['gen_rps']:>8.2f}{latency}"
                         f"{r['requests']:>6}{r['wall_s']:>8.1f}")
        lines.append("  ".join(f"{k} {v:.2f}x" for k, v in section["ratios"].items() if v is not None))
    return "\n".join(lines)
