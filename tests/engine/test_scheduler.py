"""Scheduler rules: a blocked queue does not hold back the other kind; preemption takes the newest arrivals and
never re-admits a victim in the step that evicted it."""
import random

import pytest

from orthrus_rag.engine import InvalidRequestError, PoolingParams, SamplingParams
from orthrus_rag.engine.sequence import Status
from tests.engine.conftest import run_all


def test_generate_waiting_for_kv_does_not_hold_back_embeddings(make_engine):
    engine = make_engine(num_kv_blocks=6, block_size=4, policy="fcfs")
    engine.add_request("hog", list(range(100, 116)), SamplingParams(max_tokens=4, ignore_eos=True))
    engine.step()  # hog's prompt fills 4 of 6 blocks
    engine.add_request("waits", list(range(200, 212)), SamplingParams(max_tokens=2, ignore_eos=True))
    engine.add_request("emb", list(range(300, 305)), PoolingParams(model="backbone"))
    finished = {o.request_id for o in engine.step() if o.finished}
    assert "emb" in finished and "waits" in engine.scheduler.waiting["generate"]
    assert set(run_all(engine)) == {"hog", "waits"}


def _record_steps(engine, monkeypatch) -> list:
    steps = []
    real = engine.scheduler.schedule

    def schedule():
        before = [s for s in engine.requests.values() if s.status == Status.RUNNING and s.on_backbone]
        out = real()
        still_running = set(engine.scheduler.running)  # read now: by the test's end every sequence has finished
        steps.append(([s for s in before if s.request_id in still_running], out))
        return out

    monkeypatch.setattr(engine.scheduler, "schedule", schedule)
    return steps


@pytest.mark.parametrize("seed", [2, 3, 19, 72])  # mixes in which the former scheduler broke both rules
def test_preemption_takes_the_newest_and_never_readmits_in_the_same_step(make_engine, monkeypatch, seed):
    rng = random.Random(seed)
    blocks, budget = rng.choice([8, 10, 12, 16]), rng.choice([8, 16, 24, 32])
    policy = rng.choice(["fcfs", "adaptive", "weighted", "alternating"])
    engine = make_engine(num_kv_blocks=blocks, block_size=4, max_num_batched_tokens=budget, policy=policy)
    steps = _record_steps(engine, monkeypatch)
    for i in range(12):
        ids = [rng.randrange(100, 5000) for _ in range(rng.randint(2, 24))]
        embed = rng.random() < 0.3
        params = PoolingParams(model="backbone") if embed else \
            SamplingParams(max_tokens=rng.randint(4, 16), ignore_eos=True)
        try:
            engine.add_request(f"r{i}", ids, params)
        except InvalidRequestError:  # larger than the whole pool
            pass
    results = run_all(engine)
    assert all(not isinstance(r, Exception) for r in results.values())
    preemptions = 0
    for survivors, out in steps:  # survivors: running before the step and still running after it
        placed = {c.seq.request_id for c in out.chunks}
        for victim in out.preempted:
            preemptions += 1
            assert victim.request_id not in placed
            assert all(s.arrival_seq < victim.arrival_seq for s in survivors)
    assert preemptions > 0


@pytest.mark.parametrize("policy", ["adaptive", "fcfs", "weighted"])
def test_a_colocated_embedding_larger_than_the_room_beside_decodes_runs_over_the_budget(make_engine, tiny_encoder_dir,
                                                                                         monkeypatch, policy):
    engine = make_engine(embedder=str(tiny_encoder_dir), embedder_token_cost=1.0, max_num_batched_tokens=32,
                         policy=policy)
    steps = _record_steps(engine, monkeypatch)
    engine.add_request("g", list(range(1000, 1010)), SamplingParams(max_tokens=12, ignore_eos=True))
    engine.step()  # g decodes from now on
    for name in ("big", "big2"):  # 40 embedder tokens each: more than the budget left beside a decode
        engine.add_request(name, list(range(2000, 2040)), PoolingParams())
    for name in ("big", "big2"):  # one a step, beside g's decode
        assert {(o.request_id, o.finished) for o in engine.step()} == {(name, True), ("g", False)}
    assert all(out.num_backbone_tokens <= 32 and len(out.embedder_seqs) <= 1 for _, out in steps)
    assert set(run_all(engine)) == {"g"}


def test_prefix_hits_are_counted_once_when_the_request_starts(make_engine):
    engine = make_engine(num_kv_blocks=16, block_size=4, max_num_batched_tokens=32)
    prefix = list(range(1000, 1020))  # five full blocks
    engine.add_request("c", prefix, SamplingParams(max_tokens=1, ignore_eos=True))
    usage = {out.request_id: out.result.usage for out in engine.step() if out.finished}
    engine.add_request("a", list(range(2000, 2040)), SamplingParams(max_tokens=4, ignore_eos=True))  # holds 11 blocks
    engine.add_request("b", prefix + list(range(3000, 3008)), SamplingParams(max_tokens=2, ignore_eos=True))
    waited = 0
    while engine.has_unfinished():
        usage.update({out.request_id: out.result.usage for out in engine.step() if out.finished})
        waited += "b" in engine.scheduler.waiting["generate"]
    assert waited >= 2  # b's admission failed in several steps before it started
    assert engine.get_stats()["prefix_cache_hit_tokens"] == 20
    assert {name: (u.prompt_tokens, u.cached_tokens) for name, u in usage.items()} == {
        "c": (20, 0), "a": (40, 0), "b": (28, 20)}  # each request's own share of the hits
