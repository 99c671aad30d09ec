"""What the GPU check runs, and how big: the full plan for one CUDA GPU, and the dry run's tiny plan for a CPU.

Every benchmark part is `orthrus-rag-bench` with the overrides below, one Hydra job per mode. Time boxes are in
seconds; the full plan's boxes add up to the check's 8 minutes less the wheel install. The dry run checks the
script, not the figures: to stay under 3 minutes on 2 CPU cores it runs each mode in one part or another, not all
four everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

MODES = ("hetero", "isolated", "alternating", "hf")


@dataclass(frozen=True)
class BenchPart:
    name: str  # section key and folder name
    title: str
    overrides: tuple[str, ...]
    modes: tuple[str, ...] = MODES
    box_s: float = 60.0


@dataclass(frozen=True)
class Plan:
    budget_s: float  # the whole check, after the wheel install
    test_paths: tuple[str, ...]
    tests_box_s: float
    steps_overrides: tuple[str, ...]
    steps_box_s: float
    mixed: tuple[BenchPart, ...]
    rag: BenchPart
    rates: tuple[float, float]


BIG = "dummy:llama-3.1-8b"
ENGINE_TESTS = ("tests/engine", "tests/indexes/test_torch_search.py", "tests/models/test_dummy.py")

FULL = Plan(
    budget_s=465,
    test_paths=ENGINE_TESTS,
    tests_box_s=120,
    steps_overrides=(f"model.name={BIG}",),
    steps_box_s=40,
    mixed=(
        BenchPart("backbone", "dummy Llama-3.1-8B, backbone embeddings, phases 9:1, 1:1, 1:9",
                  ("workload=phases", "embedder=backbone_raw", f"model.name={BIG}", "workload.requests=32",
                   "workload.clients=16", "workload.warmup_requests=4"), box_s=105),
        BenchPart("minilm", "dummy Llama-3.1-8B, co-located MiniLM-shaped encoder, 1:1",
                  ("workload=mixed", "embedder.name=dummy:minilm-l6", f"model.name={BIG}", "workload.requests=48",
                   "workload.clients=16", "workload.warmup_requests=4"), box_s=75),
    ),
    rag=BenchPart("rag", "IRCoT on the demo questions, dummy SmolLM2-135M and MiniLM shapes",
                  ("workload=rag", "pipeline=ircot", "dataset=demo", "dataset.limit=12",
                   "model.name=dummy:smollm2-135m", "embedder.name=dummy:minilm-l6", "workload.warmup_questions=1"),
                  box_s=110),
    rates=(1.0, 4.0),
)

DRY = Plan(
    budget_s=165,
    test_paths=("tests/indexes/test_torch_search.py", "tests/engine/test_engine_lora.py"),
    tests_box_s=35,
    steps_overrides=("model.name=dummy:tiny-llama", "workload.repeats=2", "workload.warmup=1", "workload.threads=[1]"),
    steps_box_s=15,
    mixed=(
        BenchPart("backbone", "dummy tiny Llama, backbone embeddings, phases 9:1, 1:1, 1:9",
                  ("workload=phases", "embedder=backbone_raw", "model.name=dummy:tiny-llama", "workload.requests=6",
                   "workload.clients=4", "workload.warmup_requests=2", "workload.max_tokens=8",
                   "workload.gen_prompt_tokens=32", "workload.embed_tokens=16"),
                  modes=("hetero", "isolated"), box_s=40),
        BenchPart("minilm", "dummy tiny Llama, co-located tiny BERT encoder, 1:1",
                  ("workload=mixed", "embedder.name=dummy:tiny-bert", "model.name=dummy:tiny-llama",
                   "workload.requests=12", "workload.clients=4", "workload.warmup_requests=2",
                   "workload.max_tokens=8", "workload.gen_prompt_tokens=32", "workload.embed_tokens=16"),
                  modes=("hetero", "alternating", "hf"), box_s=30),
    ),
    rag=BenchPart("rag", "IRCoT on the demo questions, dummy tiny Llama and tiny BERT",
                  ("workload=rag", "pipeline=ircot", "dataset=demo", "dataset.limit=3", "pipeline.max_steps=1",
                   "model.name=dummy:tiny-llama", "embedder.name=dummy:tiny-bert", "workload.warmup_questions=1"),
                  modes=("hetero", "hf"), box_s=45),
    rates=(2.0, 8.0),
)
