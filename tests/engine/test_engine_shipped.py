"""The engine on the shipped models (bf16): greedy tokens equal transformers `generate` on the same weights."""
import pytest
import torch

from orthrus_rag.engine import EngineConfig, LLMEngine, PoolingParams, SamplingParams
from orthrus_rag.models import load_generator
from tests.engine.conftest import hf_greedy, run_all

pytestmark = pytest.mark.shipped

QUESTIONS = ["What is the capital of France?", "Name three colours.", "Who wrote Hamlet?", "What is 7 times 8?"]


def test_smollm2_bf16_greedy_matches_generate():
    engine = LLMEngine(EngineConfig(max_num_batched_tokens=48))  # chunked prefills beside decodes
    model, tokenizer = load_generator("smollm2-135m-instruct")
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=True,
                                             add_generation_prompt=True, return_dict=False) for q in QUESTIONS]
    for i, ids in enumerate(prompts):
        engine.add_request(f"g{i}", list(ids), SamplingParams(max_tokens=16))
        engine.add_request(f"e{i}", QUESTIONS[i], PoolingParams())
    results = run_all(engine)
    assert engine.get_stats()["mixed_steps"] > 0
    matches = [results[f"g{i}"].token_ids == hf_greedy(model, list(ids), 16) for i, ids in enumerate(prompts)]
    assert all(matches), matches
    assert all(results[f"e{i}"].embedding.shape == (384,) for i in range(len(QUESTIONS)))
    assert torch.tensor(results["e0"].embedding).norm().item() == pytest.approx(1.0, abs=1e-3)
