"""`AsyncEngine`: the engine loop on a background thread, with asyncio futures and streams for callers.

Callers on an asyncio event loop submit work; the loop thread owns the `LLMEngine` (all engine state is touched by
that thread only), drains submitted commands before each step, and hands results back with
`call_soon_threadsafe`. When idle it blocks on its command queue, so an idle engine costs no CPU. Request keys,
checks on the caller's side, containment, a dead loop and shutdown: docs/engine.md ("Containment", "Liveness").
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.engine import LLMEngine, PreparedRequest, Prompt
from orthrus_rag.engine.errors import EngineDeadError, EngineError, InvalidRequestError, RequestAbortedError
from orthrus_rag.engine.observe import OBSERVER
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.request import EmbedOutput, GenerateOutput, PoolingParams, SamplingParams
from orthrus_rag.engine.step_log import StepRecord


log = logging.getLogger(__name__)
OFF_THREAD_CHARS = 4096  # texts at least this long are tokenised in a worker thread, not on the caller's loop


@dataclass
class _Waiter:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue  # receives StepOutput deltas, the final one has finished=True


@dataclass(frozen=True)
class Add:
    """Queue a prepared request under its engine key."""

    key: str
    request: PreparedRequest


@dataclass(frozen=True)
class Abort:
    """Stop a request and free its KV blocks (its caller gets RequestAbortedError)."""

    key: str


@dataclass(frozen=True)
class Shutdown:
    """Stop the loop after the commands before it (later Adds are refused)."""


Command = Add | Abort | Shutdown  # what a caller's thread sends the loop thread


class AsyncEngine(contextlib.AbstractAsyncContextManager):  # `async with AsyncEngine(...) as engine`: shut down on exit
    def __init__(self, config: EngineConfig | None = None, engine: LLMEngine | None = None):
        self.engine = engine or LLMEngine(config or EngineConfig())
        self.config = self.engine.config
        self.tokenizer = self.engine.tokenizer
        self.context_length = self.engine.runner.max_model_len  # prompt and output tokens together
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._waiters: dict[str, _Waiter] = {}  # engine key -> waiter
        self._keys: dict[str, str] = {}  # caller's request id -> engine key, while in flight
        self._ids = itertools.count()
        self._lock = threading.Lock()  # guards _keys, _dead and submissions against shutdown
        self._dead: Exception | None = None
        self._abandoned = False  # shutdown gave up waiting: the loop stops at its next turn
        self._idle, self._beat = False, time.monotonic()  # for health(): blocked on the queue, or the last step's end
        self._stats: dict = self.engine.get_stats()
        self._thread = threading.Thread(target=self._run, name="orthrus-engine", daemon=True)
        self._thread.start()

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

    def stream_outputs(self, prompt: Prompt, params: SamplingParams | None = None,
                       request_id: str | None = None) -> AsyncIterator[StepOutput]:
        """Like `stream`, with token ids and the final `GenerateOutput` (on the last item, `result`)."""
        return self._submit(prompt, params or SamplingParams(), request_id)

    async def embed(self, input: Prompt, params: PoolingParams | None = None,
                    request_id: str | None = None) -> EmbedOutput:
        return await self._result(self._submit(input, params or PoolingParams(), request_id))

    def abort(self, request_id: str) -> None:
        key = self._keys.get(request_id)
        if key is not None:
            self._commands.put(Abort(key))

    def stats(self) -> dict:
        """Counters as of the last step (a copy, safe to read from any thread)."""
        return dict(self._stats)

    def steps(self, since: int = 0, limit: int | None = None) -> list[StepRecord]:
        """The last steps with an id above `since` (the newest `limit`; runtime.step_log_size are kept), oldest
        first; safe to call from any thread."""
        return self.engine.step_log.since(since, limit)

    def step_logs(self, since: int = 0, limit: int | None = None) -> dict[str, list[StepRecord]]:
        """`steps`, under this engine's name (`engine`): the shape the server's step view takes, one list per engine."""
        return {"engine": self.steps(since, limit)}

    def embedding_dim(self, model: str | None = None) -> int:
        embedder = self.engine.embedder
        return self.engine.runner.hidden_size if model == "backbone" or embedder is None else embedder.dim

    def health(self) -> str | None:
        """Why the engine cannot serve (dead, thread gone, or no step finished within `stall_timeout_s` while it
        has work), or None when it is healthy."""
        if self._dead is not None:
            return str(self._dead)
        if not self._thread.is_alive():
            return "the engine thread is not running"
        stalled = time.monotonic() - self._beat
        if not self._idle and stalled > self.config.stall_timeout_s:
            return f"no engine step finished in the last {stalled:.0f} s (runtime.stall_timeout_s)"
        return None

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop accepting work, finish what is in flight, then stop the loop thread. After `timeout_s` (None:
        `runtime.shutdown_timeout_s`) what is still in flight fails with EngineDeadError and the thread is left to
        stop at its next turn."""
        if self._thread.is_alive():
            self._commands.put(Shutdown())
            self._thread.join(self.config.shutdown_timeout_s if timeout_s is None else timeout_s)
        if self._thread.is_alive():
            self._abandoned = True
            self._die(EngineDeadError("the engine was shut down before this request finished"))

    # ---- plumbing -------------------------------------------------------------------------------------------
    @staticmethod
    async def _result(outputs: AsyncIterator[StepOutput]):
        async for delta in outputs:
            if delta.finished:
                return delta.result
        raise RequestAbortedError("request ended without a result")

    async def _submit(self, prompt, params, request_id) -> AsyncIterator[StepOutput]:
        key, rid = self._register(request_id, await self._prepare(prompt, params))
        waiter, observer = self._waiters[key], OBSERVER.get()
        finished = False
        try:
            while not finished:
                out: StepOutput = await waiter.queue.get()
                finished = out.finished
                if finished:  # the id is free once the last output is in hand, not when this generator is closed
                    self._release(key, rid)
                if out.error is not None:
                    raise out.error
                if out.result is not None:
                    out.result.request_id = rid
                out.request_id = rid
                if observer is not None:
                    observer(out)
                yield out
        finally:
            if not finished:  # the caller went away (cancelled, disconnected): free the request's blocks
                self._release(key, rid)
                self._commands.put(Abort(key))

    def _release(self, key: str, rid: str) -> None:
        with self._lock:
            del self._waiters[key], self._keys[rid]

    async def _prepare(self, prompt: Prompt, params) -> PreparedRequest:
        """Check and tokenise on the caller's side; a long text in a worker thread, so the caller's event loop (and
        whatever else it serves) keeps running."""
        if self._dead is not None:
            raise EngineDeadError(f"the engine is not running ({self._dead}); create a new one")
        if isinstance(prompt, str) and len(prompt) >= OFF_THREAD_CHARS:
            return await asyncio.to_thread(self.engine.prepare, prompt, params)
        return self.engine.prepare(prompt, params)

    def _register(self, request_id: str | None, request: PreparedRequest) -> tuple[str, str]:
        """A fresh engine key for the request, its command queued; the caller's id must not be in flight. A request
        without an id gets a random one, which no caller's id can be expected to equal."""
        key = f"req-{next(self._ids)}"
        rid = f"req-{uuid.uuid4().hex}" if request_id is None else request_id
        with self._lock:
            if self._dead is not None:
                raise EngineDeadError(f"the engine is not running ({self._dead}); create a new one")
            if rid in self._keys:
                raise InvalidRequestError(f"request id {rid!r} is already in flight; wait for it to finish or "
                                          "choose another id", "request_id")
            self._keys[rid] = key
            self._waiters[key] = _Waiter(asyncio.get_running_loop(), asyncio.Queue())
            self._commands.put(Add(key, request))
        return key, rid

    def _deliver(self, out: StepOutput) -> None:
        waiter = self._waiters.get(out.request_id)
        if waiter is not None:
            _send(waiter, out)

    def _die(self, error: EngineDeadError) -> None:
        """Mark the engine dead and answer every waiter with `error`."""
        with self._lock:
            self._dead = self._dead or error
            waiters = list(self._waiters.items())
        for key, waiter in waiters:
            _send(waiter, StepOutput(key, finished=True, error=error))

    def _run(self) -> None:
        """The loop thread: `_loop` until shutdown; any other way out marks the engine dead and fails its waiters."""
        try:
            self._loop()
        except BaseException as err:  # noqa: BLE001 - whatever ended the loop, nobody may wait on a dead engine
            log.error("the engine thread stopped", exc_info=err)
            self._die(EngineDeadError(f"the engine thread stopped ({err!r}); start a new engine"))

    def _loop(self) -> None:
        stopping = False
        while not self._abandoned:
            block = not self.engine.has_unfinished()
            if stopping and block:
                break
            self._idle = block
            stopping |= self._drain(block, accept=not stopping)
            self._idle, self._beat = False, time.monotonic()
            try:
                outputs = self.engine.step(early=self._deliver)  # embeddings go out before the generator runs
            except Exception as err:  # outside any one request: fail those in flight, keep serving
                outputs = self._fail_all(err)
            self._stats = self.engine.get_stats()  # refreshed before results, so callers see their step
            self._beat = time.monotonic()
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
            command = self._commands.get(block)
            while True:
                shutdown |= self._apply(command, accept and not shutdown)
                command = self._commands.get_nowait()
        except queue.Empty:
            return shutdown

    def _apply(self, command: Command, accept: bool) -> bool:
        """Apply one command on the loop thread; returns True for Shutdown."""
        match command:
            case Shutdown():
                return True
            case Abort(key):
                if self.engine.abort(key):
                    self._deliver(StepOutput(key, finished=True, error=RequestAbortedError(f"request {key} aborted")))
            case Add(key, request):
                try:
                    if not accept:
                        raise EngineDeadError("the engine is shutting down; no new requests are accepted")
                    self.engine.add_prepared(key, request)
                except Exception as err:
                    self._deliver(StepOutput(key, finished=True, error=err))
        return False


def _send(waiter: _Waiter, out: StepOutput) -> None:
    """Hand an output to its caller's event loop; a closed loop (RuntimeError) means nobody waits for it any more."""
    with contextlib.suppress(RuntimeError):
        waiter.loop.call_soon_threadsafe(waiter.queue.put_nowait, out)
