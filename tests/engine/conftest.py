"""Engine fixtures: engines over the tiny random models, HF references, and a leak check after each test."""
from __future__ import annotations

import os

import pytest
import torch

from orthrus_rag.engine import EngineConfig, LLMEngine

PROMPTS = [
    "The quick brown fox",
    "In the beginning there was a small town by the river, and its people",
    "1, 2, 3, 4,",
    "Paris is the capital of",
    "A very long prompt " * 12,
    "Hello",
    "Tell me a story about dragons and knights who lived in the mountains far away from the sea.",
    "def add(a, b):\n    return",
    "Q: What is two plus two?\nA:",
]


DEVICE = os.environ.get("ORTHRUS_TEST_DEVICE", "cpu")  # engines and their transformers references run here
# The attention backend of every tiny engine; vllm_cpu (blocks of 16) and flex_paged run the suite again (.ci/run).
BACKEND = os.environ.get("ORTHRUS_TEST_ATTENTION", "sdpa_in_place")
BLOCK_SIZE = 16 if BACKEND == "vllm_cpu" else 4


def tiny_config(path, **overrides) -> EngineConfig:
    args = dict(generator=str(path), embedder=None, dtype="float32", max_num_batched_tokens=32,
                block_size=BLOCK_SIZE, num_kv_blocks=256, device=DEVICE,
                attention_backend=BACKEND)
    args.update(overrides)
    if args["block_size"] % 16:  # a test about small blocks: the kernels take blocks of 16 and more
        args["attention_backend"] = "sdpa_in_place"
    return EngineConfig(**args)


def run_all(engine: LLMEngine, max_steps: int = 10_000) -> dict:
    """Step until idle; returns request_id -> result (or the error)."""
    results = {}
    for _ in range(max_steps):
        if not engine.has_unfinished():
            break
        for out in engine.step():
            if out.finished:
                results[out.request_id] = out.error or out.result
    assert not engine.has_unfinished(), "engine did not finish"
    return results


async def until(condition, timeout: float = 10.0) -> None:
    """Poll `condition` on the event loop until it holds; TimeoutError after `timeout` seconds."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.002)


def assert_clean(engine: LLMEngine) -> None:
    """No leaked blocks, requests or pooling state."""
    assert engine.blocks.num_free == engine.blocks.num_blocks
    assert all(c == 0 for c in engine.blocks.ref_counts)
    assert not engine.requests and not engine.scheduler.running and engine.scheduler.num_waiting == 0


@pytest.fixture(scope="session")
def hf_tiny(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).to(DEVICE).eval()


@pytest.fixture
def make_engine(tiny_llama_dir):
    """Builds tiny-model engines and checks each for leaks when the test ends."""
    engines = []

    def make(**overrides) -> LLMEngine:
        engine = LLMEngine(tiny_config(tiny_llama_dir, **overrides))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        assert_clean(engine)


def hf_greedy(model, ids: list[int], max_new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids], device=model.device), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0)
    return out[0, len(ids):].tolist()


def hf_pool(model, ids: list[int], pooling: str, normalize: bool) -> torch.Tensor:
    with torch.no_grad():
        hidden = model.model(torch.tensor([ids], device=model.device)).last_hidden_state[0].cpu()
    vector = {"mean": hidden.mean(0), "last": hidden[-1], "cls": hidden[0]}[pooling]
    return torch.nn.functional.normalize(vector, dim=-1) if normalize else vector
