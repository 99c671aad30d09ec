"""`AsyncEngine`: the engine loop on a background thread, with asyncio futures and streams for callers.

Callers on an asyncio event loop submit work; the loop thread owns the `LLMEngine` (all engine state is touched by
that thread only), drains submitted commands before each step, and hands results back with
`call_soon_threadsafe`. When idle it blocks on its command queue, so an idle engine costs no CPU.

Inside the engine every request has its own key; a caller's `request_id` is only a name, and a name still in
flight is refused. Nothing a request sends can stop the loop: a failure is contained to the request it belongs to
(and a step that fails outside any request fails the requests in flight, not the loop). At shutdown every command
still queued gets an answer.
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
from orthrus_rag.engine.errors import EngineDeadError, EngineError, InvalidRequestError, RequestAbortedError
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
        self._waiters: dict[str, _Waiter] = {}  # engine key -> waiter
        self._keys: dict[str, str] = {}  # caller's request id -> engine key, while in flight
        self._ids = itertools.count()
        self._lock = threading.Lock()  # guards _keys, _dead and submissions against shutdown
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
        key = self._keys.get(request_id)
        if key is not None:
            self._commands.put(("abort", key, None, None))

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
        key, rid = self._register(request_id, prompt, params)
        waiter = self._waiters[key]
        finished = False
        try:
            while not finished:
                out: StepOutput = await waiter.queue.get()
                finished = out.finished
                if out.error is not None:
                    raise out.error
                if out.result is not None:
                    out.result.request_id = rid
                out.request_id = rid
                yield out
        finally:
            with self._lock:
                del self._waiters[key], self._keys[rid]
            if not finished:  # the caller went away (cancelled, disconnected): free the request's blocks
                self._commands.put(("abort", key, None, None))

    def _register(self, request_id: str | None, prompt: Prompt, params) -> tuple[str, str]:
        """A fresh engine key for the request, its command queued; the caller's id must not be in flight."""
        key = f"req-{next(self._ids)}"
        rid = key if request_id is None else request_id
        with self._lock:
            if self._dead is not None:
                raise EngineDeadError(f"the engine is not running ({self._dead}); create a new one")
            if rid in self._keys:
                raise InvalidRequestError(f"request id {rid!r} is already in flight; wait for it to finish or "
                                          "choose another id", "request_id")
            self._keys[rid] = key
            self._waiters[key] = _Waiter(asyncio.get_running_loop(), asyncio.Queue())
            self._commands.put(("add", key, prompt, params))
        return key, rid

    def _deliver(self, out: StepOutput) -> None:
        waiter = self._waiters.get(out.request_id)
        if waiter is not None:
            waiter.loop.call_soon_threadsafe(waiter.queue.put_nowait, out)

    def _loop(self) -> None:
        stopping = False
        while True:
            block = not self.engine.has_unfinished()
            if stopping and block:
                break
            stopping |= self._drain(block, accept=not stopping)
            try:
                outputs = self.engine.step(early=self._deliver)  # embeddings go out before the generator runs
            except Exception as err:  # outside any one request: fail those in flight, keep serving
                outputs = self._fail_all(err)
            self._stats = self.engine.get_stats()  # refreshed before results, so callers see their step
            for out in outputs:
                self._deliver(out)
        with self._lock:
            self._dead = EngineDeadError("shut down")
        self._drain(block=False, accept=False)  # answer what was queued after the last step

    def _fail_all(self, err: Exception) -> list[StepOutput]:
        error = EngineError(f"the engine step failed ({err!r}); the requests in it were stopped, retry them")
        keys = list(self.engine.requests)
        for key in keys:
            self.engine.abort(key)
        return [StepOutput(key, finished=True, error=error) for key in keys]

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
