"""AsyncEngine: concurrency, streams, aborts and shutdown from an asyncio caller."""
import asyncio

import pytest
import torch

from orthrus_rag.engine import AsyncEngine, InvalidRequestError, PoolingParams, RequestAbortedError, SamplingParams
from tests.engine.conftest import tiny_config, until


@pytest.fixture
async def engine(tiny_llama_dir):
    async with AsyncEngine(tiny_config(tiny_llama_dir)) as engine:
        yield engine
    assert engine.engine.blocks.num_free == engine.engine.blocks.num_blocks


async def test_concurrent_generate_and_embed(engine, hf_tiny, tokenizer):
    from tests.engine.conftest import hf_greedy, hf_pool

    params = SamplingParams(max_tokens=6, ignore_eos=True)
    prompts = [f"Tell me more about item {i}" for i in range(6)]
    many = await asyncio.gather(*[engine.generate(p, params) for p in prompts],
                                *[engine.embed(f"text {i}", PoolingParams()) for i in range(6)])
    for prompt, out in zip(prompts, many[:6]):
        want = hf_greedy(hf_tiny, tokenizer.encode(prompt), 6)
        assert want and out.token_ids[:len(want)] == want
    for i, out in enumerate(many[6:]):
        want = hf_pool(hf_tiny, tokenizer.encode(f"text {i}"), "mean", True)
        assert (torch.from_numpy(out.embedding) - want).abs().max().item() <= 1e-5
    assert engine.stats()["steps"] > 0


async def test_stream_joins_to_generate_text(engine, hf_tiny, tokenizer):
    from tests.engine.conftest import hf_greedy

    params = SamplingParams(max_tokens=8)
    want = tokenizer.decode(hf_greedy(hf_tiny, tokenizer.encode("Stream"), 8), skip_special_tokens=True)
    assert "".join([d async for d in engine.stream("Stream", params)]) == want


async def test_bad_request_raises_to_its_caller_only(engine):
    good = asyncio.create_task(engine.generate("fine", SamplingParams(max_tokens=3)))
    with pytest.raises(InvalidRequestError):
        await engine.generate("", SamplingParams())
    assert (await good).usage.completion_tokens >= 1


async def test_abandoned_stream_aborts_and_frees_blocks(engine):
    stream = engine.stream_outputs("Long story", SamplingParams(max_tokens=200, ignore_eos=True), request_id="s")
    async for _ in stream:
        break
    await stream.aclose()
    await until(lambda: engine.stats()["kv_blocks_used"] == 0 and not engine.engine.requests)


async def test_abort_by_id(engine):
    task = asyncio.create_task(engine.generate("abort me", SamplingParams(max_tokens=400, ignore_eos=True),
                                               request_id="x"))
    await until(lambda: engine._keys.get("x") in engine.engine.requests)  # admitted by the engine
    engine.abort("x")
    with pytest.raises(RequestAbortedError):
        await asyncio.wait_for(task, timeout=30)


async def test_shutdown_drains_in_flight_work(tiny_llama_dir):
    engine = AsyncEngine(tiny_config(tiny_llama_dir))
    task = asyncio.create_task(engine.generate("drain", SamplingParams(max_tokens=5, ignore_eos=True)))
    await until(lambda: engine.engine.requests)
    await asyncio.to_thread(engine.shutdown)
    assert (await asyncio.wait_for(task, timeout=30)).usage.completion_tokens == 5


async def test_caller_id_in_flight_is_refused_and_the_first_still_answers(engine):
    first = asyncio.create_task(engine.generate("one", SamplingParams(max_tokens=30, ignore_eos=True),
                                                request_id="same"))
    await until(lambda: "same" in engine._keys)
    with pytest.raises(InvalidRequestError, match="already in flight"):
        await engine.generate("two", SamplingParams(max_tokens=2), request_id="same")
    out = await asyncio.wait_for(first, timeout=30)
    assert out.request_id == "same" and out.usage.completion_tokens == 30
    again = await asyncio.wait_for(engine.generate("three", SamplingParams(max_tokens=2), request_id="same"), 30)
    assert again.request_id == "same"


async def test_a_request_without_id_never_clashes_with_a_callers_id(engine):
    ids = ["req-1", "req-2", "req-3"]  # what numbered engine keys would be
    named = [asyncio.create_task(engine.generate("one", SamplingParams(max_tokens=30, ignore_eos=True),
                                                 request_id=rid)) for rid in ids]
    await until(lambda: all(rid in engine._keys for rid in ids))
    anonymous = await asyncio.wait_for(engine.generate("two", SamplingParams(max_tokens=2)), 30)
    assert anonymous.usage.completion_tokens == 2 and anonymous.request_id not in ids
    assert [out.request_id for out in await asyncio.gather(*named)] == ids


async def test_shutdown_answers_every_queued_command(tiny_llama_dir, monkeypatch):
    import time

    from orthrus_rag.engine import EngineDeadError

    engine = AsyncEngine(tiny_config(tiny_llama_dir))
    real = engine.engine.step

    def slow_step(*args, **kwargs):
        time.sleep(0.03)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine.engine, "step", slow_step)
    first = asyncio.create_task(engine.generate("drain", SamplingParams(max_tokens=3, ignore_eos=True)))
    await until(lambda: engine.engine.requests)
    stopper = asyncio.create_task(asyncio.to_thread(engine.shutdown))
    later = []
    for i in range(30):
        later.append(asyncio.create_task(engine.generate(f"late {i}", SamplingParams(max_tokens=2))))
        await asyncio.sleep(0.005)
    done = await asyncio.wait_for(asyncio.gather(first, *later, return_exceptions=True), timeout=30)
    await stopper
    assert done[0].usage.completion_tokens == 3
    assert all(isinstance(d, EngineDeadError) or d.usage.completion_tokens >= 1 for d in done[1:])


async def test_loop_survives_a_failing_step(engine, monkeypatch):
    from orthrus_rag.engine import EngineError

    real = engine.engine.scheduler.schedule
    calls = {"n": 0}

    def broken():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("planted scheduler failure")
        return real()

    monkeypatch.setattr(engine.engine.scheduler, "schedule", broken)
    with pytest.raises(EngineError, match="planted"):
        await asyncio.wait_for(engine.generate("first", SamplingParams(max_tokens=2)), 30)
    out = await asyncio.wait_for(engine.generate("second", SamplingParams(max_tokens=2)), 30)
    assert out.usage.completion_tokens == 2
