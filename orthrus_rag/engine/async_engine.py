"""`AsyncEngine`: the engine loop on a background thread, with asyncio futures and streams for callers.

Callers on an asyncio event loop submit work; the loop thread owns the `LLMEngine` (all engine state is touched by
that thread only), drains submitted commands before each step, and hands results back with
`call_soon_threadsafe`. When idle it blocks on its command queue, so an idle engine costs no CPU.
"""
from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.engine import LLMEngine, Prompt
from orthrus_rag.engine.errors import EngineDeadError, RequestAbortedError
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.request import EmbedOutput, GenerateOutput, PoolingParams, SamplingParams


@dataclass
class _Waiter:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue  # receives StepOutput deltas, the final one has finished=True


class AsyncEngine:
    def __init__(self, config: EngineConfig | None = None, engine: LLMEngine | None = None):
        self.engine = engine or LLMEngine(config or EngineConfig())
        self.config = self.engine.config
        self.tokenizer = self.engine.tokenizer
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._waiters: dict[str, _Waiter] = {}
        self._ids = itertools.count()
        self._dead: Exception | None = None
        self._stats: dict = self.engine.get_stats()
        self._thread = threading.Thread(target=self._loop, name="orthrus-engine", daemon=True)
        self._thread.start()

    async def __aenter__(self) -> AsyncEngine:
        return self

    async def __aexit__(self, *exc) -> None:
        self.shutdown()

    # ---- public API -----------------------------------------------------------------------------------------
    async def generate(self, prompt: Prompt, params: SamplingParams | None = None,
                       request_id: str | None = None) -> GenerateOutput:
        return await self._result(self._submit(prompt, params or SamplingParams(), request_id))

    async def stream(self, prompt: Prompt, params: SamplingParams | None = None,
                     request_id: str | None = None) -> AsyncIterator[str]:
        """Text deltas as they are produced; stop strings are never split across deltas."""
        async for delta in self._submit(prompt, params or SamplingParams(), request_id):
            if delta.delta_text:
                yield delta.delta_text

    async def stream_outputs(self, prompt: Prompt, params: SamplingParams | None = None,
                             request_id: str | None = None) -> AsyncIterator[StepOutput]:
        """Like `stream`, with token ids and the final `GenerateOutput` (on the last item, `result`)."""
        async for delta in self._submit(prompt, params or SamplingParams(), request_id):
            yield delta

    async def embed(self, input: Prompt, params: PoolingParams | None = None,
                    request_id: str | None = None) -> EmbedOutput:
        return await self._result(self._submit(input, params or PoolingParams(), request_id))

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id, None, None))

    def stats(self) -> dict:
        """Counters as of the last step (a copy, safe to read from any thread)."""
        return dict(self._stats)

    def embedding_dim(self, model: str | None = None) -> int:
        return self.engine.embedding_dim(model)

    def shutdown(self) -> None:
        """Stop accepting work, finish what is in flight, then stop the loop thread."""
        if self._thread.is_alive():
            self._commands.put(("shutdown", None, None, None))
            self._thread.join()

    # ---- plumbing -------------------------------------------------------------------------------------------
    @staticmethod
    async def _result(outputs: AsyncIterator[StepOutput]):
        """The final result of a submitted request."""
        async for delta in outputs:
            if delta.finished:
                return delta.result
        raise RequestAbortedError("request ended without a result")

    async def _submit(self, prompt, params, request_id) -> AsyncIterator[StepOutput]:
        if self._dead is not None:
            raise EngineDeadError(f"the engine is not running ({self._dead}); create a new one")
        rid = request_id or f"req-{next(self._ids)}"
        waiter = _Waiter(asyncio.get_running_loop(), asyncio.Queue())
        self._waiters[rid] = waiter
        self._commands.put(("add", rid, prompt, params))
        finished = False
        try:
            while not finished:
                out: StepOutput = await waiter.queue.get()
                finished = out.finished
                if out.error is not None:
                    raise out.error
                yield out
        finally:
            self._waiters.pop(rid, None)
            if not finished:  # the caller went away (cancelled, disconnected): free the request's blocks
                self.abort(rid)

    def _deliver(self, out: StepOutput) -> None:
        waiter = self._waiters.get(out.request_id)
        if waiter is not None:
            waiter.loop.call_soon_threadsafe(waiter.queue.put_nowait, out)

    def _loop(self) -> None:
        stopping = False
        try:
            while True:
                block = not self.engine.has_unfinished()
                if stopping and block:
                    break
                stopping |= self._drain(block, accept=not stopping)
                outputs = self.engine.step(early=self._deliver)  # embeddings go out before the generator runs
                self._stats = self.engine.get_stats()  # refreshed before results, so callers see their step
                for out in outputs:
                    self._deliver(out)
        except Exception as err:  # an engine bug: fail everything in flight rather than hang callers
            self._dead = err
            for rid in list(self._waiters):
                self._deliver(StepOutput(rid, finished=True, error=EngineDeadError(f"engine loop failed: {err!r}")))
            raise
        self._dead = EngineDeadError("shut down")

    def _drain(self, block: bool, accept: bool) -> bool:
        """Apply queued commands; returns True when shutdown was asked."""
        shutdown = False
        try:
            command = self._commands.get(timeout=None) if block else self._commands.get_nowait()
            while True:
                shutdown |= self._apply(command, accept and not shutdown)
                command = self._commands.get_nowait()
        except queue.Empty:
            return shutdown

    def _apply(self, command: tuple, accept: bool) -> bool:
        op, rid, prompt, params = command
        if op == "shutdown":
            return True
        if op == "abort":
            if self.engine.abort(rid):
                self._deliver(StepOutput(rid, finished=True, error=RequestAbortedError(f"request {rid} aborted")))
            return False
        try:
            if not accept:
                raise EngineDeadError("the engine is shutting down; no new requests are accepted")
            self.engine.add_request(rid, prompt, params)
        except Exception as err:
            self._deliver(StepOutput(rid, finished=True, error=err))
        return False
