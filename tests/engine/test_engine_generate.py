"""Greedy generation through the packed, chunked, paged engine equals transformers `generate`."""
import pytest

from orthrus_rag.engine import PoolingParams, SamplingParams
from tests.engine.conftest import BLOCK_SIZE, PROMPTS, hf_greedy, run_all

MAX_NEW = 10


@pytest.fixture(scope="module")
def references(tokenizer, hf_tiny):
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    return prompts, [hf_greedy(hf_tiny, ids, MAX_NEW) for ids in prompts]


def submit_mixed(engine, prompts):
    for i, ids in enumerate(prompts):
        engine.add_request(f"g{i}", ids, SamplingParams(max_tokens=MAX_NEW, ignore_eos=True))
        engine.add_request(f"e{i}", ids, PoolingParams(model="backbone"))


@pytest.mark.parametrize("policy", ["adaptive", "fcfs", "weighted", "alternating"])
def test_greedy_matches_hf_with_chunking_and_mixing(make_engine, references, policy):
    prompts, expected = references
    engine = make_engine(policy=policy, max_num_batched_tokens=24)
    submit_mixed(engine, prompts)
    results = run_all(engine)
    assert [results[f"g{i}"].token_ids for i in range(len(prompts))] == expected
    stats = engine.get_stats()
    assert stats["tokens"]["embed"] > 0
    if policy != "alternating":
        assert stats["mixed_steps"] > 0  # embedding rows really shared steps with generation rows
    else:
        assert stats["mixed_steps"] == 0


def test_long_prompts_are_chunked(make_engine, references):
    prompts, expected = references
    engine = make_engine(max_num_batched_tokens=8)
    for i, ids in enumerate(prompts):
        engine.add_request(f"g{i}", ids, SamplingParams(max_tokens=MAX_NEW, ignore_eos=True))
    results = run_all(engine)
    assert [results[f"g{i}"].token_ids for i in range(len(prompts))] == expected


def test_identical_under_preemption(make_engine, references):
    prompts, expected = references
    engine = make_engine(num_kv_blocks=96 // BLOCK_SIZE, max_num_batched_tokens=64)  # room for 96 tokens
    submit_mixed(engine, prompts)
    results = run_all(engine)
    assert engine.get_stats()["preemptions"] > 0
    assert [results[f"g{i}"].token_ids for i in range(len(prompts))] == expected


def test_identical_with_prefix_cache_hits(make_engine, tokenizer, hf_tiny):
    shared = tokenizer.encode("You are a helpful assistant. Answer in one short sentence, please. " * 2)
    prompts = [shared + tokenizer.encode(q) for q in ["Who are you?", "What is 2+2?", "Name a colour."]]
    expected = [hf_greedy(hf_tiny, ids, MAX_NEW) for ids in prompts]
    engine = make_engine(max_num_batched_tokens=64)
    engine.add_request("first", prompts[0], SamplingParams(max_tokens=MAX_NEW, ignore_eos=True))
    first = run_all(engine)["first"]
    for i, ids in enumerate(prompts):
        engine.add_request(f"g{i}", ids, SamplingParams(max_tokens=MAX_NEW, ignore_eos=True))
    results = run_all(engine)
    assert engine.blocks.hits >= 3 * (len(shared) // BLOCK_SIZE) * BLOCK_SIZE - BLOCK_SIZE
    assert first.token_ids == expected[0]
    assert [results[f"g{i}"].token_ids for i in range(3)] == expected


def test_no_prefix_caching_still_identical(make_engine, references):
    prompts, expected = references
    engine = make_engine(enable_prefix_caching=False)
    submit_mixed(engine, prompts)
    results = run_all(engine)
    assert engine.blocks.hits == 0
    assert [results[f"g{i}"].token_ids for i in range(len(prompts))] == expected


def test_outputs_carry_usage_and_timings(make_engine, tokenizer):
    engine = make_engine()
    ids = tokenizer.encode("Hello there")
    engine.add_request("a", ids, SamplingParams(max_tokens=4, ignore_eos=True))
    out = run_all(engine)["a"]
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == 4
    assert out.usage.total_tokens == len(ids) + 4
    assert out.finish_reason == "length"
    t = out.timings
    assert t.arrival <= t.first_scheduled <= t.first_token <= t.finished
