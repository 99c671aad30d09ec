"""Sampling parameters, stop conditions and stream deltas."""
import torch

from orthrus_rag.engine import SamplingParams
from orthrus_rag.engine.sampler import _top_p, sample
from tests.engine.conftest import run_all


def generate(engine, prompt, params, rid="a"):
    engine.add_request(rid, prompt, params)
    deltas, result = [], None
    while engine.has_unfinished():
        for out in engine.step():
            deltas.append(out.delta_text)
            result = out.result if out.finished else result
    return deltas, result


def test_seeded_sampling_is_reproducible(make_engine):
    engine = make_engine()
    params = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, top_k=50, seed=7, ignore_eos=True)
    _, a = generate(engine, "Sample me", params, "a")
    _, b = generate(engine, "Sample me", params, "b")
    _, c = generate(engine, "Sample me", SamplingParams(max_tokens=12, temperature=1.0, seed=8, ignore_eos=True), "c")
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_top_k_one_is_greedy(make_engine):
    engine = make_engine()
    _, greedy = generate(engine, "Hello", SamplingParams(max_tokens=8, ignore_eos=True), "g")
    _, topk = generate(engine, "Hello", SamplingParams(max_tokens=8, temperature=0.8, top_k=1, seed=1,
                                                       ignore_eos=True), "k")
    assert greedy.token_ids == topk.token_ids


def test_top_p_keeps_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = torch.isfinite(_top_p(logits.clone(), 0.75))
    assert kept.tolist() == [True, True, False, False]
    assert sample(logits, SamplingParams(temperature=0.0), None) == 0


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


def test_stream_deltas_join_to_text(make_engine):
    engine = make_engine()
    deltas, out = generate(engine, "Stream this", SamplingParams(max_tokens=10, ignore_eos=True))
    assert "".join(deltas) == out.text
    assert run_all(engine) == {}
