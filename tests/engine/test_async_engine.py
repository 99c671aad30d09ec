"""AsyncEngine: concurrency, streams, aborts and shutdown from an asyncio caller."""
import asyncio

import pytest

from orthrus_rag.engine import AsyncEngine, InvalidRequestError, PoolingParams, RequestAbortedError, SamplingParams
from tests.engine.conftest import tiny_config


@pytest.fixture
async def engine(tiny_llama_dir):
    async with AsyncEngine(tiny_config(tiny_llama_dir)) as engine:
        yield engine
    assert engine.engine.blocks.num_free == engine.engine.blocks.num_blocks


async def test_concurrent_generate_and_embed(engine):
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    alone = await engine.generate("Tell me more", params)
    many = await asyncio.gather(*[engine.generate("Tell me more", params) for _ in range(6)],
                                *[engine.embed(f"text {i}", PoolingParams()) for i in range(6)])
    assert all(out.token_ids == alone.token_ids for out in many[:6])
    assert all(out.embedding.shape == (64,) for out in many[6:])
    assert engine.stats()["steps"] > 0


async def test_stream_joins_to_generate_text(engine):
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    full = await engine.generate("Stream", params)
    assert "".join([d async for d in engine.stream("Stream", params)]) == full.text


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
    for _ in range(100):
        if engine.stats()["kv_blocks_used"] == 0 and not engine.engine.requests:
            break
        await asyncio.sleep(0.02)
    assert engine.stats()["kv_blocks_used"] == 0


async def test_abort_by_id(engine):
    task = asyncio.create_task(engine.generate("abort me", SamplingParams(max_tokens=400, ignore_eos=True),
                                               request_id="x"))
    await asyncio.sleep(0.05)
    engine.abort("x")
    with pytest.raises(RequestAbortedError):
        await task


async def test_shutdown_drains_in_flight_work(tiny_llama_dir):
    engine = AsyncEngine(tiny_config(tiny_llama_dir))
    task = asyncio.create_task(engine.generate("drain", SamplingParams(max_tokens=5, ignore_eos=True)))
    await asyncio.sleep(0.01)
    await asyncio.to_thread(engine.shutdown)
    assert (await task).usage.completion_tokens == 5
