"""`orthrus-rag-bench`: serving modes side by side on the same requests, bench.json in the run dir.

Workloads (mixed, phases, steps, rag, indexing) with example commands, the modes (hetero, isolated, alternating, hf),
how each is run and how bench.json is laid out: eval/bench/README.md. The rag workload also writes bench.md and PNG
plots (eval/bench/report.py).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from orthrus_rag.launch import UserError, launch
from orthrus_rag.settings import check_settings, plain, typed, user_errors
from orthrus_rag.stack import StackPlan

from .metrics import MODES

APP = "orthrus-rag-bench"


def check_modes(cfg: DictConfig) -> None:
    if unknown := [m for m in cfg.modes if m not in MODES]:
        raise UserError(f"unknown modes {unknown}; choose from {list(MODES)}")


WORKLOAD_MINIMUMS = {"clients": 1, "requests": 1, "gen_prompt_tokens": 1, "embed_tokens": 1, "max_tokens": 1,
                     "warmup_requests": 0}


def workload_from_config(cfg: DictConfig):
    """The closed-loop workload; its counts and shares are in range, else a UserError naming the key."""
    from .runner import Phase, Workload

    check_modes(cfg)
    spec = plain(cfg.workload)
    check_settings(Workload, spec, "workload")
    spec["phases"] = [typed(Phase, p, f"workload.phases[{i}]") for i, p in enumerate(spec["phases"])]
    workload = Workload(**spec)
    for key, least in WORKLOAD_MINIMUMS.items():
        if getattr(workload, key) < least:
            raise UserError(f"workload.{key}: must be >= {least}, got {getattr(workload, key)!r}")
    names = [phase.name for phase in workload.phases]
    if not names or len(set(names)) < len(names):
        raise UserError(f"workload.phases: give one or more phases with distinct names, got {names}")
    for i, phase in enumerate(workload.phases):
        if not 0 <= phase.embed_share <= 1:
            raise UserError(f"workload.phases[{i}].embed_share: must be in [0, 1], got {phase.embed_share!r}")
    return workload


def rag_rates(cfg: DictConfig) -> list:
    rates = list(cfg.rates) if cfg.get("rates") is not None else [cfg.get("rate")]
    if bad := [r for r in rates if r is not None and not (isinstance(r, (int, float)) and r > 0)]:
        raise UserError(f"rates must be > 0 questions/s, or null for a closed loop; got {bad}")
    return [float(r) if r is not None else None for r in rates]


def run_rag(cfg: DictConfig) -> dict:
    from ..experiment.datasets import DatasetSpec, read_questions
    from .rag import RagSetup, RagWorkload, run_rag_bench
    from .report import format_rag_table, write_rag_reports

    check_modes(cfg)
    spec = DatasetSpec.from_config(cfg.dataset)
    questions = read_questions(spec)
    setup = RagSetup(StackPlan.from_config(cfg, spec.corpus), questions, typed(RagWorkload, cfg.workload, "workload"))
    rates = rag_rates(cfg)
    with user_errors(ValueError, prefix="workload: "):
        setup.workload.loads(rates)
    bench = run_rag_bench(setup, rates, list(cfg.modes))
    paths = write_rag_reports(bench, Path(HydraConfig.get().runtime.output_dir))
    print(format_rag_table(bench))
    print("\n".join(f"{name}: {path}" for name, path in paths.items()), flush=True)
    return bench


def run(cfg: DictConfig) -> dict:
    from .runner import format_table, run_bench

    if cfg.workload.name == "rag":
        return run_rag(cfg)
    if cfg.workload.name == "steps":
        from .steps import format_steps_table, steps_bench
        return write_bench(steps_bench(cfg), format_steps_table)
    if cfg.workload.name == "indexing":
        from .indexing import format_indexing_table, indexing_bench
        return write_bench(indexing_bench(cfg), format_indexing_table)
    workload = workload_from_config(cfg)
    plan = StackPlan.from_config(cfg, pipelines={})
    return write_bench(run_bench(plan.engine, plan.embedding.params, workload, list(cfg.modes)), format_table)


def write_bench(bench: dict, table: Callable[[dict], str]) -> dict:
    """bench.json into the Hydra run dir; the table `table(bench)` and the file's path on stdout."""
    path = Path(HydraConfig.get().runtime.output_dir) / "bench.json"
    path.write_text(json.dumps(bench, indent=2) + "\n")
    print(table(bench))
    print(f"bench: {path}", flush=True)
    return bench


def main() -> None:
    launch(APP, "bench", run)


if __name__ == "__main__":
    main()
