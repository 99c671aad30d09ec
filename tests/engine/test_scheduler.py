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
