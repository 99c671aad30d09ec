"""Sampling parameters, stop conditions and stream deltas."""
import torch

from orthrus_rag.engine import SamplingParams
from orthrus_rag.engine.sampler import _top_p_sorted, sample
from tests.engine.conftest import run_all


def generate(engine, prompt, params, rid="a"):
    engine.add_request(rid, prompt, params)
    deltas, result = [], None
    while engine.has_unfinished():
        for out in engine.step():
            deltas.append(out.delta_text)
            result = out.result if out.finished else result
    return deltas, result


def test_seeded_sampling_is_reproducible_whatever_shares_the_step(make_engine):
    engine = make_engine()
    params = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, top_k=50, seed=7, ignore_eos=True)
    _, alone = generate(engine, "Sample me", params, "alone")
    for i in range(5):  # neighbours in the same steps: other prompts, seeds and settings
        engine.add_request(f"n{i}", f"neighbour {i} says", SamplingParams(max_tokens=12, temperature=0.7 + i / 10,
                                                                          seed=100 + i, ignore_eos=True))
    engine.add_request("batched", "Sample me", params)
    engine.add_request("other_seed", "Sample me", SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, top_k=50,
                                                                 seed=8, ignore_eos=True))
    results = run_all(engine)
    assert results["batched"].token_ids == alone.token_ids
    assert results["other_seed"].token_ids != alone.token_ids  # only the seed differs


def test_top_k_one_is_greedy(make_engine):
    engine = make_engine()
    _, greedy = generate(engine, "Hello", SamplingParams(max_tokens=8, ignore_eos=True), "g")
    _, topk = generate(engine, "Hello", SamplingParams(max_tokens=8, temperature=0.8, top_k=1, seed=1,
                                                       ignore_eos=True), "k")
    assert greedy.token_ids == topk.token_ids


def test_top_p_keeps_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = torch.isfinite(_top_p_sorted(logits[None], torch.tensor([0.75]))[0])  # logits already sorted
    assert kept.tolist() == [True, True, False, False]
    generator = torch.Generator().manual_seed(0)
    draws = [sample(logits, SamplingParams(temperature=1.0, top_p=0.75), generator) for _ in range(2000)]
    assert set(draws) == {0, 1}
    assert abs(draws.count(0) / len(draws) - 0.5 / 0.8) < 0.05  # renormalised over the kept tokens


def test_stop_string_truncates_and_is_never_streamed(make_engine):
    engine = make_engine()
    _, free = generate(engine, "Count:", SamplingParams(max_tokens=16, ignore_eos=True), "free")
    stop = free.text[5:8]
    assert len(stop) == 3 and stop.strip()
    deltas, out = generate(engine, "Count:", SamplingParams(max_tokens=16, stop=[stop], ignore_eos=True), "s")
    assert out.finish_reason == "stop"
    assert out.text == free.text[:free.text.index(stop)]
    assert "".join(deltas) == out.text
    assert all(stop not in d for d in deltas)


def test_stop_token_ids_and_max_tokens(make_engine):
    engine = make_engine()
    _, free = generate(engine, "Tokens", SamplingParams(max_tokens=6, ignore_eos=True), "free")
    assert free.finish_reason == "length" and len(free.token_ids) == 6
    stop_id = free.token_ids[2]
    first = free.token_ids.index(stop_id)
    _, out = generate(engine, "Tokens", SamplingParams(max_tokens=6, stop_token_ids=[stop_id]), "s")
    assert out.finish_reason == "stop" and out.token_ids == free.token_ids[:first + 1]


def test_stream_deltas_join_to_text(make_engine, hf_tiny, tokenizer):
    from tests.engine.conftest import hf_greedy

    engine = make_engine()
    deltas, out = generate(engine, "Stream this", SamplingParams(max_tokens=10))
    want = hf_greedy(hf_tiny, tokenizer.encode("Stream this"), 10)
    assert out.token_ids == want
    assert "".join(deltas) == out.text == tokenizer.decode(want, skip_special_tokens=True)
