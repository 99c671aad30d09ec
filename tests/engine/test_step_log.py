"""The step log: one record per engine step, bounded, read after an id."""
from __future__ import annotations

from orthrus_rag.engine import PoolingParams, SamplingParams
from orthrus_rag.engine.step_log import StepLog, StepRecord
from tests.engine.conftest import run_all


def record(step_id: int) -> StepRecord:
    return StepRecord(step_id, 0.0, 0.01, 0.01, 0.0, {"decode": 1, "prefill": 0, "embed": 0}, 0, 1, {}, 1, 8)


def test_the_log_keeps_the_last_records_and_reads_after_an_id():
    log = StepLog(3)
    for step_id in range(1, 6):
        log.append(record(step_id))
    assert [r.id for r in log.since()] == [3, 4, 5] and log.next_id == 6
    assert [r.id for r in log.since(4)] == [5]
    assert [r.id for r in log.since(0, limit=2)] == [4, 5]
    assert log.since(5) == []


def test_each_step_is_recorded_with_the_tokens_the_counters_saw(make_engine):
    engine = make_engine(max_num_batched_tokens=16, step_log_size=1000)
    engine.add_request("g", "The quick brown fox jumps over the lazy dog", SamplingParams(max_tokens=5,
                                                                                          temperature=0))
    engine.add_request("e", "a passage to embed", PoolingParams(model="backbone"))
    run_all(engine)
    records = engine.step_log.since()
    assert [r.id for r in records] == list(range(1, engine.stats.steps + 1))
    for kind in ("decode", "prefill", "embed"):
        assert sum(r.tokens[kind] for r in records) == engine.stats.tokens[kind]
    assert all(sum(r.tokens.values()) <= 16 for r in records)
    assert records[0].kv_blocks_used > 0 and records[-1].running == 0 and records[-1].kv_blocks_used == 0
    assert all(r.step_s >= r.generator_s > 0 for r in records)


def test_a_log_of_size_zero_keeps_nothing(make_engine):
    engine = make_engine(step_log_size=0)
    engine.add_request("g", "Hello", SamplingParams(max_tokens=3, temperature=0))
    run_all(engine)
    assert engine.stats.steps > 0 and engine.step_log.since() == []


def test_a_recompute_after_preemption_is_counted_as_prefill(make_engine, monkeypatch):
    engine = make_engine(num_kv_blocks=12, block_size=4, max_num_batched_tokens=64, step_log_size=1000)
    decode_rows, real = [], engine.scheduler.schedule

    def schedule():  # a decode row: one token that completes a sequence which already has output
        out = real()
        if not out.is_empty:
            decode_rows.append(sum(c.seq.kind == "generate" and bool(c.seq.output_ids) and c.num_tokens == 1
                                   and c.completes for c in out.chunks))
        return out

    monkeypatch.setattr(engine.scheduler, "schedule", schedule)
    for name, first in (("a", 1000), ("b", 2000)):
        engine.add_request(name, list(range(first, first + 16)), SamplingParams(max_tokens=20, ignore_eos=True))
    run_all(engine)
    assert engine.stats.preemptions > 0
    assert [r.tokens["decode"] for r in engine.step_log.since()] == decode_rows
