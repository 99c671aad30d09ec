"""The passage KV store (runtime.passage_reuse=blend | full_reuse): exact (the default) changes nothing; a passage
stored after the preamble and placed where it was computed gives the exact prefill's tokens; a moved passage is
computed once after the preamble, stored equal to transformers' prefill of preamble + passage, and copied in; blend
recomputes the first share of it exactly (all of it: exact prefill); reused KV never enters the prefix cache's chain
of exact prefixes; bad spans and settings are refused."""
from __future__ import annotations

import math

import pytest
import torch
from transformers import DynamicCache

from orthrus_rag.engine import EngineConfig, SamplingParams
from orthrus_rag.engine.errors import InvalidRequestError
from orthrus_rag.engine.passage_store import spans_of
from tests.engine.conftest import hf_greedy, run_all, tiny_config

PRE, P1, P2, TAIL = list(range(100, 141)), list(range(200, 233)), list(range(300, 327)), list(range(400, 411))


def spans(*parts: list[int]) -> list[list[int]]:
    """[start, end) of each part after the preamble, in a prompt of PRE + parts (the last part is not a passage)."""
    out, at = [], len(PRE)
    for part in parts[:-1]:
        out.append([at, at + len(part)])
        at += len(part)
    return out


def generate(engine, prompts: dict[str, tuple[list[int], list[list[int]]]], max_tokens: int = 6) -> dict:
    for rid, (ids, passage_spans) in prompts.items():
        engine.add_request(rid, ids, SamplingParams(max_tokens=max_tokens, passage_spans=passage_spans))
    return run_all(engine)


def test_off_changes_nothing(make_engine, hf_tiny):
    engine = make_engine()
    ids = PRE + P1 + P2 + TAIL
    out = generate(engine, {"a": (ids, spans(P1, P2, TAIL))})["a"]
    assert out.token_ids == hf_greedy(hf_tiny, ids, 6) and out.usage.reused_tokens == 0
    assert engine.get_stats()["passage_store"] is None


def test_a_passage_placed_where_it_was_computed_gives_the_exact_tokens(make_engine, hf_tiny):
    engine = make_engine(passage_reuse="full_reuse", enable_prefix_caching=False)
    first = generate(engine, {"a": (PRE + P1 + TAIL, spans(P1, TAIL))})["a"]
    again = PRE + P1 + TAIL[::-1]
    second = generate(engine, {"b": (again, spans(P1, TAIL))})["b"]
    assert first.usage.reused_tokens == 0 and second.usage.reused_tokens == len(P1)
    assert second.token_ids == hf_greedy(hf_tiny, again, 6)
    assert engine.get_stats()["passage_store"]["installed_tokens"] == len(P1)


def test_a_moved_passage_is_stored_after_the_preamble_and_copied_in(make_engine, hf_tiny):
    engine = make_engine(passage_reuse="full_reuse")
    ids = PRE + P1 + P2 + TAIL
    results = generate(engine, {"a": (ids, spans(P1, P2, TAIL))})
    assert list(results) == ["a"]  # the request that stored P2 is the engine's own: callers never see it
    assert results["a"].usage.reused_tokens == len(P2)
    stats = engine.get_stats()["passage_store"]
    assert stats["passages"] == 2 and stats["stored_tokens"] == len(P1) + len(P2)
    (_, _, key), = spans_of(PRE + P2, [[len(PRE), len(PRE + P2)]])  # P2's key after PRE
    stored = engine.store.passages[key]
    assert stored.position == len(PRE)
    cache = DynamicCache(config=hf_tiny.config)
    with torch.no_grad():
        hf_tiny(input_ids=torch.tensor([PRE + P2]), past_key_values=cache, use_cache=True)
    for layer, hf_layer in enumerate(cache.layers):
        torch.testing.assert_close(stored.k[layer], hf_layer.keys[0, :, len(PRE):].transpose(0, 1),
                                   atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(stored.v[layer], hf_layer.values[0, :, len(PRE):].transpose(0, 1),
                                   atol=1e-5, rtol=1e-5)
    # the same prompt again: its prefix cache hit stops before the first reused passage
    again = generate(engine, {"b": (ids, spans(P1, P2, TAIL))})["b"]
    assert again.usage.cached_tokens <= len(PRE) + len(P1) and again.usage.reused_tokens == len(P2)
    assert again.token_ids == results["a"].token_ids


def test_later_requests_find_the_passages_stored(make_engine):
    engine = make_engine(passage_reuse="full_reuse")
    generate(engine, {"a": (PRE + P1 + P2 + TAIL, spans(P1, P2, TAIL))})
    other = PRE + P2 + P1 + TAIL  # P2 first: the prefix cache holds PRE + P2 (as stored); P1 moves, copied in
    out = generate(engine, {"b": (other, spans(P2, P1, TAIL))})["b"]
    assert out.usage.cached_tokens > len(PRE) and out.usage.reused_tokens == len(P1)
    assert engine.get_stats()["passage_store"]["stored_tokens"] == len(P1) + len(P2)  # nothing computed twice


@pytest.mark.parametrize("bad", [[[5, 3]], [[0, 4], [2, 6]], [["a", 2]], [[1, 2, 3]], "x", [[-1, 2]]])
def test_bad_spans_are_refused(make_engine, bad):
    engine = make_engine(passage_reuse="full_reuse")
    with pytest.raises(InvalidRequestError, match="passage_spans"):
        engine.add_request("a", PRE + TAIL, SamplingParams(passage_spans=bad))
    with pytest.raises(InvalidRequestError, match="before the prompt's last token"):
        engine.add_request("a", PRE + TAIL, SamplingParams(passage_spans=[[2, len(PRE + TAIL)]]))
    assert not engine.has_unfinished()


@pytest.mark.parametrize(("key", "value", "message"), [
    ("passage_reuse", "cacheblend", "runtime.passage_reuse must be exact, blend or full_reuse"),
    ("passage_recompute", 0, r"runtime.passage_recompute must be in \(0, 1\]"),
    ("passage_recompute", 1.5, r"runtime.passage_recompute must be in \(0, 1\]")])
def test_bad_settings_are_refused(tiny_llama_dir, key, value, message):
    with pytest.raises(InvalidRequestError, match=message):
        EngineConfig(**{**vars(tiny_config(tiny_llama_dir)), key: value})


def prompt_kv(engine, ids: list[int], passage_spans: list[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer the K and V the engine holds for the prompt `ids` once it is computed (the request then ends)."""
    engine.add_request("a", ids, SamplingParams(max_tokens=4, passage_spans=passage_spans))
    seq = engine.requests["a"]
    while seq.num_computed < len(ids):
        engine.step()
    where = engine._slots(seq, 0, len(ids))
    kv = [engine.runner.cache.read(layer, where) for layer in range(len(engine.runner.cache.k))]
    engine.abort("a")
    return kv


def hf_kv(model, ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return [(layer.keys[0].transpose(0, 1), layer.values[0].transpose(0, 1)) for layer in cache.layers]


@pytest.mark.parametrize(("reuse", "share"), [("blend", 1.0), ("blend", 0.5), ("full_reuse", 1.0)])
def test_blend_recomputes_the_first_share_of_a_copied_passage_exactly(make_engine, hf_tiny, reuse, share):
    """The rows of a copied passage that blend recomputes, and every row before them, hold the exact prefill's K/V
    at every layer; the copied rows after them do not (past the first layer, where a token's K/V depends on the
    tokens it attends to). A share of 1 is exact prefill."""
    engine = make_engine(passage_reuse=reuse, passage_recompute=share, enable_prefix_caching=False)
    ids = PRE + P1 + P2 + TAIL
    got, want = prompt_kv(engine, ids, spans(P1, P2, TAIL)), hf_kv(hf_tiny, ids)
    recomputed = 0 if reuse == "full_reuse" else math.ceil(len(P2) * share)
    exact = len(ids) if recomputed == len(P2) else len(PRE + P1) + recomputed
    for layer, ((k, v), (hf_k, hf_v)) in enumerate(zip(got, want)):
        torch.testing.assert_close((k[:exact], v[:exact]), (hf_k[:exact], hf_v[:exact]), atol=1e-5, rtol=1e-5)
        if exact < len(ids) and layer > 0:
            assert not torch.allclose(v[exact:], hf_v[exact:], atol=1e-3), f"layer {layer} is exact past {exact}"
    stats = engine.get_stats()["passage_store"]
    assert stats["installed_tokens"] == len(P2)
    assert stats["recomputed_tokens"] == recomputed
    steps = engine.step_log.since()  # the engine view's record of the same
    assert sum(r.copied_tokens for r in steps) == len(P2) - recomputed
    assert sum(r.recomputed_tokens for r in steps) == recomputed


def test_blend_at_a_share_of_one_gives_the_exact_tokens(make_engine, hf_tiny):
    engine = make_engine(passage_reuse="blend", passage_recompute=1.0)
    ids = PRE + P1 + P2 + TAIL
    out = generate(engine, {"a": (ids, spans(P1, P2, TAIL))})["a"]
    assert out.token_ids == hf_greedy(hf_tiny, ids, 6) and out.usage.reused_tokens == 0
    assert engine.get_stats()["passage_store"]["recomputed_tokens"] == len(P2)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("reuse", ["full_reuse", "blend"])
def test_requests_arriving_over_time_with_shared_passages_all_finish(make_engine, seed, reuse):
    import random

    rng = random.Random(seed)
    engine = make_engine(passage_reuse=reuse, passage_recompute=rng.choice([0.15, 0.5]), max_num_batched_tokens=64,
                         num_kv_blocks=rng.choice([60, 256]))
    passages = [list(range(1000 + 50 * i, 1000 + 50 * i + rng.randint(5, 40))) for i in range(10)]
    pending = []
    for r in range(20):
        ids, spans_ = list(PRE), []
        for passage in rng.sample(passages, rng.randint(1, 5)):
            ids += [7, 8]
            spans_.append([len(ids), len(ids) + len(passage)])
            ids += passage
        pending.append((f"r{r}", ids + [9, 10, 11], spans_))
    finished = []
    for step in range(3000):
        if step % 2 == 0 and pending:
            rid, ids, spans_ = pending.pop(0)
            engine.add_request(rid, ids, SamplingParams(max_tokens=3, passage_spans=spans_))
        if not pending and not engine.has_unfinished():
            break
        finished += [out.request_id for out in engine.step() if out.finished]
    assert sorted(finished) == sorted(f"r{r}" for r in range(20))  # every caller's request, and none of the engine's
    assert engine.get_stats()["passage_store"]["installed_tokens"] > 0
