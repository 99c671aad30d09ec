"""Bad requests, aborts, errors and queue limits: clear errors, neighbours unaffected, nothing leaked."""
from collections import OrderedDict

import pytest

from orthrus_rag.engine import InvalidRequestError, PoolingParams, QueueFullError, SamplingParams
from tests.engine.conftest import run_all

BAD = [
    ("", SamplingParams(), "empty"),
    ("   ", PoolingParams(model="backbone"), "empty"),
    ([], SamplingParams(), "non-empty"),
    ([10**9], SamplingParams(), "token ids"),
    ("hi", SamplingParams(max_tokens=0), "max_tokens"),
    ("hi", SamplingParams(temperature=-1.0), "temperature"),
    ("hi", SamplingParams(top_p=0.0), "top_p"),
    ("hi", SamplingParams(top_k=-2), "top_k"),
    ("hi", SamplingParams(stop=[""]), "stop"),
    ("hi", PoolingParams(pooling="max", model="backbone"), "pooling"),
    ("hi", PoolingParams(model="other"), "model"),
    ("word " * 600, SamplingParams(), "context length"),
    ("hi", SamplingParams(max_tokens=1000), "context length"),
]


@pytest.mark.parametrize("prompt,params,message", BAD)
def test_bad_request_is_refused_and_neighbours_finish(make_engine, prompt, params, message):
    engine = make_engine()
    engine.add_request("before", "Hello there", SamplingParams(max_tokens=3))
    with pytest.raises(InvalidRequestError, match=message):
        engine.add_request("bad", prompt, params)
    engine.add_request("after", "General Kenobi", PoolingParams(model="backbone"))
    results = run_all(engine)
    assert set(results) == {"before", "after"}
    assert results["before"].usage.completion_tokens == 3


@pytest.mark.parametrize("text", ["\u200b", "\u200b\u200b\u200b", "\x00\x01"])
def test_text_the_embedder_turns_into_no_tokens_is_refused(make_engine, tiny_encoder_dir, text):
    engine = make_engine(embedder=str(tiny_encoder_dir))
    with pytest.raises(InvalidRequestError, match="the input has no tokens"):
        engine.add_request("blank", text, PoolingParams())
    assert not engine.requests


def test_duplicate_request_id(make_engine):
    engine = make_engine()
    engine.add_request("a", "one", SamplingParams(max_tokens=2))
    with pytest.raises(InvalidRequestError, match="already in use"):
        engine.add_request("a", "two", SamplingParams(max_tokens=2))
    run_all(engine)


def test_request_larger_than_kv_pool(make_engine):
    engine = make_engine(num_kv_blocks=4)
    with pytest.raises(InvalidRequestError, match="num_kv_blocks"):
        engine.add_request("a", "a prompt that needs many blocks", SamplingParams(max_tokens=64))


def test_queue_full_refuses_without_losing_anything(make_engine):
    engine = make_engine(max_waiting=3)
    for i in range(3):
        engine.add_request(f"r{i}", "queued", SamplingParams(max_tokens=2))
    with pytest.raises(QueueFullError, match="max_waiting"):
        engine.add_request("r3", "one too many", SamplingParams(max_tokens=2))
    assert set(run_all(engine)) == {"r0", "r1", "r2"}


def test_abort_frees_blocks_and_pooling_state(make_engine, tokenizer):
    engine = make_engine(max_num_batched_tokens=8)
    engine.add_request("g", "Once upon a time in a land far away", SamplingParams(max_tokens=50, ignore_eos=True))
    engine.add_request("e", tokenizer.encode("a long input " * 10), PoolingParams(model="backbone"))
    engine.add_request("w", "still waiting", SamplingParams(max_tokens=2))
    for _ in range(3):
        engine.step()
    seq_e = engine.requests["e"]
    assert seq_e.pool_state is not None and seq_e.block_table
    assert engine.abort("g") and engine.abort("e") and engine.abort("w")
    assert not engine.abort("e")  # already gone
    assert seq_e.pool_state is None and not seq_e.block_table
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_failing_forward_fails_that_step_only(make_engine, monkeypatch):
    engine = make_engine()
    engine.add_request("a", "first", SamplingParams(max_tokens=2))
    real = engine.runner.execute
    calls = {"n": 0}

    def flaky(chunks):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated device error")
        return real(chunks)

    monkeypatch.setattr(engine.runner, "execute", flaky)
    results = run_all(engine)
    assert isinstance(results["a"], RuntimeError)
    engine.add_request("b", "second", SamplingParams(max_tokens=2))
    assert run_all(engine)["b"].usage.completion_tokens == 2


# ---- values that used to pass validation and fail later, inside the step -------------------------------------
@pytest.mark.parametrize("params,message", [
    (SamplingParams(seed=2**64), "seed"),
    (SamplingParams(seed=-1), "seed"),
    (SamplingParams(seed=True), "seed"),
    (SamplingParams(top_k=True), "top_k"),
    (SamplingParams(stop_token_ids=["x"]), "stop_token_ids"),
    (SamplingParams(stop_token_ids=[-3]), "stop_token_ids"),
    (SamplingParams(ignore_eos="yes"), "ignore_eos"),
    (PoolingParams(normalize="no", model="backbone"), "normalize"),
    (PoolingParams(model="backbone", truncate=0), "truncate"),
    (PoolingParams(model="backbone", truncate=-4), "truncate"),
    (PoolingParams(model="backbone", truncate=True), "truncate"),
    (PoolingParams(model="backbone", truncate=2.5), "truncate"),
    (PoolingParams(model="backbone", truncate="8"), "truncate"),
])
def test_value_that_would_fail_later_is_refused_and_nothing_is_queued(make_engine, params, message):
    engine = make_engine()
    with pytest.raises(InvalidRequestError, match=message):
        engine.add_request("bad", "Hello", params)
    assert not engine.requests and engine.scheduler.num_waiting == 0
    engine.add_request("next", "Hello", SamplingParams(max_tokens=2))
    assert run_all(engine)["next"].usage.completion_tokens == 2


def test_largest_seed_is_accepted(make_engine):
    engine = make_engine()
    engine.add_request("a", "Hello", SamplingParams(max_tokens=3, temperature=1.0, seed=2**64 - 1))
    assert len(run_all(engine)["a"].token_ids) >= 1


def test_tiny_temperature_samples_greedily(make_engine):
    engine = make_engine()
    engine.add_request("tiny", "The quick brown fox", SamplingParams(max_tokens=6, temperature=1e-50,
                                                                     ignore_eos=True))
    engine.add_request("greedy", "The quick brown fox", SamplingParams(max_tokens=6, ignore_eos=True))
    results = run_all(engine)
    assert results["tiny"].token_ids == results["greedy"].token_ids


def test_token_ids_beyond_the_model_vocabulary_are_refused(make_engine):
    engine = make_engine()
    vocab = engine.runner.model.get_input_embeddings().num_embeddings
    with pytest.raises(InvalidRequestError, match="token ids"):
        engine.add_request("bad", [vocab], SamplingParams())
    assert engine.vocab_size <= vocab


@pytest.mark.parametrize("where", ["sample", "append_token"])
def test_one_rows_failure_fails_that_request_only(make_engine, monkeypatch, where):
    from orthrus_rag.engine import engine as engine_module

    engine = make_engine()
    real = getattr(engine_module, where)

    def planted(*args):
        row = args[0] if where == "append_token" else None
        if (row is not None and row.request_id == "bad") or (row is None and args[1].seed == 7):
            raise FloatingPointError("planted failure")
        return real(*args)

    def planted_batch(logits, params, generators):  # the whole step's sampling fails: rows are retried one by one
        if any(p.seed == 7 for p in params):
            raise FloatingPointError("planted failure")
        return real_batch(logits, params, generators)

    real_batch = engine_module.sample_batch
    monkeypatch.setattr(engine_module, where, planted)
    if where == "sample":
        monkeypatch.setattr(engine_module, "sample_batch", planted_batch)
    engine.add_request("good", "Hello there", SamplingParams(max_tokens=4, ignore_eos=True))
    engine.add_request("bad", "Hello there", SamplingParams(max_tokens=4, ignore_eos=True, seed=7))
    results = run_all(engine)
    assert isinstance(results["bad"], FloatingPointError)
    assert results["good"].usage.completion_tokens == 4


class CountingQueue(OrderedDict):
    """A waiting queue that counts the entries any scan of it visits."""

    visited = 0

    def _count(self, items):
        for item in items:
            CountingQueue.visited += 1
            yield item

    def __iter__(self):
        return self._count(super().__iter__())

    def values(self):
        return self._count(super().values())

    def items(self):
        return self._count(super().items())


def test_aborting_many_waiting_requests_is_linear(make_engine):
    engine = make_engine(max_waiting=20_000)
    engine.scheduler.waiting = {kind: CountingQueue() for kind in engine.scheduler.waiting}
    for i in range(20_000):
        engine.add_request(f"r{i}", [5, 6, 7], SamplingParams(max_tokens=1))
    CountingQueue.visited = 0
    for i in reversed(range(20_000)):
        engine.abort(f"r{i}")
    assert engine.scheduler.num_waiting == 0
    assert CountingQueue.visited <= 20_000  # a scan of the queue per removal visits ~2e8 entries


@pytest.mark.parametrize("top_p", [5e-324, 1e-300, 1e-45])
def test_vanishing_top_p_keeps_the_best_token(make_engine, top_p):
    engine = make_engine()
    engine.add_request("p", "The quick brown fox", SamplingParams(max_tokens=5, temperature=1.0, top_p=top_p,
                                                                  seed=1, ignore_eos=True))
    engine.add_request("g", "The quick brown fox", SamplingParams(max_tokens=5, ignore_eos=True))
    results = run_all(engine)
    assert results["p"].token_ids == results["g"].token_ids
