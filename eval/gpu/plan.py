"""What the GPU check runs, and how big: conf/gpu_check/full.yaml for one CUDA GPU, conf/gpu_check/dry.yaml for the
dry run on a CPU. Every benchmark part is `orthrus-rag-bench` with its overrides, one Hydra job per mode; time boxes
are in seconds."""
from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf

from orthrus_rag.launch import CONF_DIR

from ..bench.metrics import DEFAULT_MODES


@dataclass(frozen=True)
class BenchPart:
    name: str  # section key and folder name
    title: str
    overrides: tuple[str, ...]
    modes: tuple[str, ...] = DEFAULT_MODES
    box_s: float = 60.0


@dataclass(frozen=True)
class Plan:
    model: str  # the generator shape of the steps and mixed parts
    budget_s: float  # the whole check, after the wheel install
    test_paths: tuple[str, ...]
    tests_box_s: float
    steps_overrides: tuple[str, ...]
    steps_backends: tuple[str, ...]  # the steps part runs once with each (runtime.attention_backend)
    steps_box_s: float  # per backend
    mixed: tuple[BenchPart, ...]
    rag: BenchPart
    rates: tuple[float, float]


def load_plan(name: str) -> Plan:
    """conf/gpu_check/<name>.yaml (`full` or `dry`) as a Plan, its `${model}` references resolved."""
    spec = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "gpu_check" / f"{name}.yaml"), resolve=True)
    mixed, rag = spec.pop("mixed"), spec.pop("rag")
    return Plan(**_tuples(spec), mixed=tuple(BenchPart(**_tuples(p)) for p in mixed), rag=BenchPart(**_tuples(rag)))


def _tuples(spec: dict) -> dict:
    return {key: tuple(value) if isinstance(value, list) else value for key, value in spec.items()}
