"""A state machine over AsyncEngine: requests added, streamed, their callers cancelled, aborted by id, steps failing,
shutdown, in any order. Invariants: every caller gets its answer or a clear engine error within a bounded wait,
nothing hangs, and no KV block or request is held once the last caller is done."""
from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from orthrus_rag.engine import AsyncEngine, EngineError, LLMEngine, PoolingParams, SamplingParams
from tests.engine.conftest import tiny_config

WAIT_S = 60  # the longest any caller may wait at the end of an example
PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog " * 3, "1, 2, 3,", "x"]
NAMES = [None, "a", "b"]  # caller ids: None is a fresh one; "a" and "b" are reused, in flight or not
TOKENS = st.sampled_from([1, 12, 400, 400])  # 400: still running when later rules cancel or abort it
ORPHAN_S = 0.25  # a request whose caller is gone leaves the engine within this (far less than 400 decode steps)


class EngineMachine(RuleBasedStateMachine):
    llm: LLMEngine  # one engine under every example; each example drives it through its own AsyncEngine
    aborts_in_flight = 0  # aborts that named a request in flight, over all examples

    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.engine = AsyncEngine(engine=self.llm)
        self.calls: list[tuple[asyncio.Task, bool]] = []  # (task, whether its caller cancelled it)
        self.names: list[str | None] = []
        self.fail_steps = 0
        self.shut = False
        real_step = self.llm.step

        def step(early=None):
            if self.fail_steps:
                self.fail_steps -= 1
                raise RuntimeError("injected step failure")
            return real_step(early)

        self.llm.step = step

    def _start(self, coro, name) -> None:
        self.calls.append((self.loop.create_task(coro), False))
        self.names.append(name)
        self.loop.run_until_complete(asyncio.sleep(0))  # the call is submitted before the next rule

    @rule(prompt=st.sampled_from(PROMPTS), max_tokens=TOKENS, name=st.sampled_from(NAMES))
    def generate(self, prompt, max_tokens, name):
        self._start(self.engine.generate(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True), name), name)

    @rule(prompt=st.sampled_from(PROMPTS), max_tokens=TOKENS, read=st.integers(0, 3),
          name=st.sampled_from(NAMES))
    def stream(self, prompt, max_tokens, read, name):
        """A streaming caller that reads `read` deltas, then stops reading (closing its stream)."""
        async def partial():
            outputs = self.engine.stream_outputs(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True), name)
            try:
                async for i, _ in _enumerate(outputs):
                    if i + 1 >= read:
                        break
            finally:
                await outputs.aclose()

        self._start(partial(), name)

    @rule(prompt=st.sampled_from(PROMPTS), backbone=st.booleans())
    def embed(self, prompt, backbone):
        self._start(self.engine.embed(prompt, PoolingParams(model="backbone" if backbone else None)), None)

    @precondition(lambda self: self.calls)
    @rule(data=st.data())
    def cancel_caller(self, data):
        i = data.draw(st.integers(0, len(self.calls) - 1))
        task, _ = self.calls[i]
        if not task.done():
            task.cancel()
            self.calls[i] = (task, True)

    @precondition(lambda self: self.calls)
    @rule(data=st.data())
    def abort(self, data):
        """Abort by the caller id of an earlier call (in flight or not; the draw must not depend on timing)."""
        name = self.names[data.draw(st.integers(0, len(self.calls) - 1))] or "nobody"
        EngineMachine.aborts_in_flight += name in self.engine._keys
        self.engine.abort(name)

    @rule(n=st.integers(1, 2))
    def fail_steps_next(self, n):
        self.fail_steps = n

    @rule(ms=st.integers(0, 30))
    def run_loop(self, ms):
        self.loop.run_until_complete(asyncio.sleep(ms / 1000))

    @precondition(lambda self: not self.shut)
    @rule()
    def shutdown(self):
        self.loop.run_until_complete(asyncio.wait_for(asyncio.to_thread(self.engine.shutdown, 30), WAIT_S))
        self.shut = True

    @invariant()
    def engine_thread_alive_until_shutdown(self):
        assert self.shut or self.engine.health() is None

    def teardown(self):
        try:
            tasks = [t for t, _ in self.calls]
            if tasks:
                done, pending = self.loop.run_until_complete(asyncio.wait(tasks, timeout=WAIT_S))
                assert not pending, f"{len(pending)} callers still waiting after {WAIT_S} s"
            for task, cancelled in self.calls:
                if task.cancelled():
                    assert cancelled, "a caller was cancelled that did not cancel itself"
                elif task.exception() is not None:
                    assert isinstance(task.exception(), EngineError), repr(task.exception())
            self.loop.run_until_complete(_until(lambda: not self.llm.requests, ORPHAN_S))  # no orphan runs on
            assert not self.llm.requests, "requests run on after their callers went away"
            self.loop.run_until_complete(asyncio.to_thread(self.engine.shutdown, 30))
            assert not self.llm.requests and self.llm.scheduler.num_waiting == 0
            assert self.llm.blocks.num_free == self.llm.blocks.num_blocks, "KV blocks held after the last request"
        finally:
            del self.llm.step  # the engine's own step again
            self.loop.close()


async def _until(condition, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)


async def _enumerate(items):
    i = 0
    async for item in items:
        yield i, item
        i += 1


@pytest.fixture(scope="module")
def tiny_llm(tiny_llama_dir, tiny_encoder_dir):
    return LLMEngine(tiny_config(tiny_llama_dir, embedder=str(tiny_encoder_dir), num_kv_blocks=24,
                                 max_num_batched_tokens=32, max_num_seqs=4))


def test_async_engine_state_machine(tiny_llm):
    EngineMachine.llm = tiny_llm
    run_state_machine_as_test(EngineMachine, settings=settings(
        max_examples=200, stateful_step_count=12, deadline=None, derandomize=True, database=None,
        suppress_health_check=list(HealthCheck)))
    assert EngineMachine.aborts_in_flight >= 1  # the rules did reach requests mid-flight (4-40 seen on 2 cores)
