"""A dead engine is visible at once: whatever ends the loop thread, in-flight and later calls fail with
EngineDeadError within a second and health() says why; shutdown is bounded; a caller's closed event loop harms
nobody; tokenising a huge prompt costs its own caller only."""
import asyncio
import threading
import time

import pytest

from orthrus_rag.engine import AsyncEngine, EngineDeadError, InvalidRequestError, SamplingParams
from orthrus_rag.engine.block_manager import BlockManager
from tests.engine.conftest import tiny_config

LONG = SamplingParams(max_tokens=400, ignore_eos=True)


def freed_twice(self, seq):
    raise AssertionError(f"block {seq.block_table[0] if seq.block_table else 0} freed twice")


async def started(engine: AsyncEngine, n: int = 2) -> list[asyncio.Task]:
    """n long generations, each with at least one token out (so they are in the engine, mid-flight)."""
    tasks, firsts = [], []
    for i in range(n):
        first = asyncio.Event()

        async def run(first=first, i=i):
            async for _ in engine.stream(f"a long story number {i}", LONG):
                first.set()

        tasks.append(asyncio.create_task(run()))
        firsts.append(first)
    await asyncio.wait_for(asyncio.gather(*(f.wait() for f in firsts)), timeout=30)
    return tasks


async def assert_dead_within_a_second(engine: AsyncEngine, tasks: list[asyncio.Task]) -> None:
    start = time.monotonic()
    done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=1)
    assert all(isinstance(r, EngineDeadError) for r in done), done
    with pytest.raises(EngineDeadError):
        await asyncio.wait_for(engine.generate("later", SamplingParams(max_tokens=2)), timeout=1)
    assert time.monotonic() - start < 1
    assert engine.health() is not None and "engine" in engine.health()


@pytest.mark.parametrize("path", ["abort", "fail_all", "deliver"])
async def test_each_way_the_loop_dies_fails_every_caller(tiny_llama_dir, monkeypatch, path):
    engine = AsyncEngine(tiny_config(tiny_llama_dir))
    try:
        tasks = await started(engine)
        if path == "abort":  # an abort whose bookkeeping raises (the block manager's own check)
            monkeypatch.setattr(BlockManager, "free_sequence", freed_twice)
            engine.abort(next(iter(engine._keys)))
        elif path == "fail_all":  # a step fails outside any request, and failing its requests raises too
            monkeypatch.setattr(engine.engine, "step", lambda early=None: 1 / 0)
            monkeypatch.setattr(engine, "_fail_all", lambda err: freed_twice(None, type("S", (), {"block_table": []})))
        else:  # handing a result back raises (anything but a closed caller loop)
            monkeypatch.setattr(engine, "_deliver", lambda out: (_ for _ in ()).throw(ValueError("broken waiter")))
        await assert_dead_within_a_second(engine, tasks)
    finally:
        monkeypatch.undo()
        engine.shutdown(timeout_s=5)


async def test_a_closed_caller_loop_harms_nobody(tiny_llama_dir):
    """A caller whose event loop closed before its answer came: the engine goes on serving the others."""
    engine = AsyncEngine(tiny_config(tiny_llama_dir))
    try:
        def orphan():
            loop = asyncio.new_event_loop()
            task = loop.create_task(engine.generate("orphaned request", SamplingParams(max_tokens=50,
                                                                                          ignore_eos=True)))
            loop.run_until_complete(asyncio.sleep(0.05))  # submitted, then the loop closes under it
            task.cancel()
            loop.close()

        thread = threading.Thread(target=orphan)
        thread.start()
        thread.join(10)
        out = await asyncio.wait_for(engine.generate("still served", SamplingParams(max_tokens=4)), timeout=30)
        assert out.usage.completion_tokens >= 1 and engine.health() is None
    finally:
        engine.shutdown(timeout_s=10)


async def test_health_reports_a_stalled_step(tiny_llama_dir, monkeypatch):
    engine = AsyncEngine(tiny_config(tiny_llama_dir, stall_timeout_s=0.2))
    release = threading.Event()
    real_step = engine.engine.step

    def slow_step(early=None):
        release.wait(10)
        return real_step(early)

    try:
        assert engine.health() is None
        monkeypatch.setattr(engine.engine, "step", slow_step)
        task = asyncio.create_task(engine.generate("stuck", SamplingParams(max_tokens=2)))
        deadline = time.monotonic() + 5
        while engine.health() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert "no engine step finished" in engine.health()
        release.set()
        await asyncio.wait_for(task, timeout=10)
        assert engine.health() is None
    finally:
        release.set()
        engine.shutdown(timeout_s=10)


async def test_shutdown_is_bounded_and_fails_what_remains(tiny_llama_dir, monkeypatch):
    engine = AsyncEngine(tiny_config(tiny_llama_dir))
    release = threading.Event()
    real_step = engine.engine.step
    monkeypatch.setattr(engine.engine, "step", lambda early=None: (release.wait(10), real_step(early))[1])
    task = asyncio.create_task(engine.generate("slow", SamplingParams(max_tokens=50, ignore_eos=True)))
    await asyncio.sleep(0.1)
    start = time.monotonic()
    await asyncio.to_thread(engine.shutdown, 0.3)
    assert time.monotonic() - start < 2
    with pytest.raises(EngineDeadError, match="shut down before this request finished"):
        await asyncio.wait_for(task, timeout=1)
    release.set()
    with pytest.raises(EngineDeadError):
        await engine.generate("after", SamplingParams(max_tokens=2))


async def test_a_huge_prompt_is_tokenised_off_the_engine_thread(tiny_llama_dir):
    """A 1 MiB prompt beside 8 streams: it is refused (too long) and the streams' tokens are not held up."""
    engine = AsyncEngine(tiny_config(tiny_llama_dir))
    try:
        gaps, threads, took = [], set(), []
        real_tokenize = engine.engine._tokenize

        def tokenize(*args):
            threads.add(threading.current_thread().name)
            start = time.monotonic()
            try:
                return real_tokenize(*args)
            finally:
                took.append(time.monotonic() - start)

        engine.engine._tokenize = tokenize

        async def stream(i):
            last = None
            async for _ in engine.stream(f"stream {i}", SamplingParams(max_tokens=60, ignore_eos=True)):
                now = time.monotonic()
                if last is not None:
                    gaps.append(now - last)
                last = now

        streams = [asyncio.create_task(stream(i)) for i in range(8)]
        await asyncio.sleep(0.2)
        gaps.clear()  # the streams' steady state, from here on
        with pytest.raises(InvalidRequestError, match="context length"):
            await engine.generate("word " * (1 << 18), SamplingParams(max_tokens=4))  # 1 MiB of text
        await asyncio.wait_for(asyncio.gather(*streams), timeout=60)
        assert "orthrus-engine" not in threads
        median = sorted(gaps)[len(gaps) // 2]
        # on the engine thread the streams would stall for the whole tokenisation; a busy machine stretches both
        allowed = max(median + 0.1, 0.5 * max(took))
        assert gaps and max(gaps) < allowed, (max(gaps), median, max(took))
    finally:
        engine.shutdown(timeout_s=10)
