"""Property-based test of the engine: whatever mix of requests arrives (random and extreme parameters, text and
token-id inputs, long inputs, duplicate ids, aborts at random points) on a tiny KV pool, every request gets a
result or a clear error at admission, nothing fails inside a step, and the engine is left clean and serving."""
import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orthrus_rag.engine import (EngineError, InvalidRequestError, LLMEngine, PoolingParams, QueueFullError,
                                SamplingParams)
from tests.engine.conftest import assert_clean, tiny_config

ODD_FLOATS = [0.0, -0.0, 1e-300, 1e-50, 1e-6, 1e-5, 0.5, 1.0, 2.0, 1e6, 1e300, -1.0, math.inf, -math.inf, math.nan]
ODD_INTS = [-(2**63), -1, 0, 1, 2, 7, 2**31, 2**63 - 1, 2**64 - 1, 2**64, 10**30]
ODD_TEXTS = ["", " ", "\ud800", "a\udfffb", "\x00", "é" * 50, "word " * 700, "Hello there", "🙂 emoji", "\n\n"]

floats = st.sampled_from(ODD_FLOATS) | st.floats(allow_nan=True, allow_infinity=True)
ints = st.sampled_from(ODD_INTS) | st.integers(-5, 40)
texts = st.sampled_from(ODD_TEXTS) | st.text(max_size=60)
token_ids = st.lists(st.integers(-3, 49200) | st.sampled_from([2**63, -(2**63)]), max_size=600)
prompts = texts | token_ids | st.sampled_from([None, 3, 1.5, {"a": 1}, [1, "x"], [True], (1, 2)])

sampling = st.builds(SamplingParams, max_tokens=st.integers(1, 12) | ints, temperature=floats, top_p=floats,
                     top_k=ints, seed=st.none() | ints,
                     stop=st.lists(st.text(max_size=3), max_size=3) | st.sampled_from(["x", None, [1]]),
                     stop_token_ids=st.lists(ints, max_size=3), ignore_eos=st.booleans() | st.sampled_from([1, None]))
pooling = st.builds(PoolingParams, pooling=st.sampled_from(["mean", "last", "cls", "max", None]),
                    normalize=st.booleans() | st.sampled_from([0, "yes"]),
                    model=st.sampled_from([None, "backbone", "other"]),
                    truncate=st.none() | ints | st.sampled_from([1.5, "4", True]))
ids = st.sampled_from([f"r{i}" for i in range(8)])
operations = st.lists(st.one_of(st.tuples(st.just("add"), ids, prompts, sampling | pooling),
                                st.tuples(st.just("abort"), ids), st.tuples(st.just("step"))), max_size=30)


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    return LLMEngine(tiny_config(tiny_llama_dir, num_kv_blocks=24, max_num_batched_tokens=16, max_num_seqs=4,
                                 max_waiting=6))


def _collect(engine, outputs, finished: Counter, results: dict | None = None):
    for out in outputs:
        assert out.error is None, f"{out.request_id} failed inside a step: {out.error!r}"
        if out.finished:
            finished[out.request_id] += 1
            if results is not None:
                results[out.request_id] = out.result


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(operations)
def test_any_request_mix_leaves_the_engine_clean_and_serving(engine, ops):
    # Counted per admission: a name reused after its first request ended is a second request that must end too.
    accepted, aborted, finished, sequences = Counter(), Counter(), Counter(), []
    for op in ops:
        if op[0] == "add":
            _, rid, prompt, params = op
            try:
                engine.add_request(rid, prompt, params)
                accepted[rid] += 1
                sequences.append(engine.requests[rid])
            except (InvalidRequestError, QueueFullError) as err:
                assert str(err)  # a message that says what was wrong
        elif op[0] == "abort":
            if engine.abort(op[1]):
                aborted[op[1]] += 1
        else:
            _collect(engine, engine.step(), finished)
    for _ in range(2000):
        if not engine.has_unfinished():
            break
        _collect(engine, engine.step(), finished)
    assert accepted == finished + aborted  # every admitted request ended exactly once
    assert_clean(engine)
    assert all(s.pool_state is None and not s.block_table for s in sequences)  # no pooling state or KV kept
    engine.add_request("normal", "Hello there", SamplingParams(max_tokens=2))
    normal = {}
    while engine.has_unfinished():
        _collect(engine, engine.step(), Counter(), normal)
    assert normal["normal"].usage.completion_tokens == 2
    assert_clean(engine)


def test_engine_error_is_the_base_of_admission_errors():
    assert issubclass(InvalidRequestError, EngineError) and issubclass(QueueFullError, EngineError)
