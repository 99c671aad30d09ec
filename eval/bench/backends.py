"""The ways of serving the same embed and generate requests that the benchmark compares (modes, cores and why
`isolated` runs the engine in both processes: eval/bench/README.md).

Each backend is an `EngineLike` (orthrus_rag/engine/protocol.py), so it can stand in for an `AsyncEngine` under
`DenseRetriever` and `EngineReasoner`; it also offers `await settled_stats()` (counters once idle) and `close()`.
Without params, the backend's own (the benchmark's) sampling and pooling settings apply.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import multiprocessing as mp
import queue
import threading
import time
from dataclasses import dataclass, replace

import torch
from transformers.generation.streamers import BaseStreamer

import numpy as np

from orthrus_rag.engine import AsyncEngine, EngineConfig, LLMEngine, PoolingParams, SamplingParams
from orthrus_rag.engine.request import EmbedOutput, GenerateOutput, RequestTimings, Usage
from orthrus_rag.models import load_embedder, load_generator, load_tokenizer, set_threads
from orthrus_rag.training.pooled import backbone


class ModeUnavailable(RuntimeError):
    """A mode that cannot run here (a peer not installed, or not starting): the benchmark skips it, saying why."""


class BenchDefaults:
    """Mixin before an engine class: a request without params takes the benchmark's (a copy, never shared)."""

    sampling: SamplingParams
    pooling: PoolingParams

    async def embed(self, text: str, params: PoolingParams | None = None) -> EmbedOutput:
        return await super().embed(text, replace(params or self.pooling))

    async def generate(self, text: str, params: SamplingParams | None = None) -> GenerateOutput:
        return await super().generate(text, replace(params or self.sampling))


class EngineBackend(BenchDefaults, AsyncEngine):
    """Modes `hetero` and `alternating`: the AsyncEngine itself, its params defaulting to the benchmark's."""

    def __init__(self, config: EngineConfig, sampling: SamplingParams, pooling: PoolingParams):
        super().__init__(config)
        self.sampling, self.pooling = sampling, pooling

    async def settled_stats(self) -> dict:
        """Counters once the engine is idle: `stats()` is refreshed after a step's results are delivered, so right
        after the last answer it can still miss that step."""
        for _ in range(500):
            stats = self.stats()
            if not stats["running"] and not any(stats["waiting"].values()):
                break
            await asyncio.sleep(0.01)
        return stats

    def close(self) -> None:
        self.shutdown()


# ---- isolated: one process per kind --------------------------------------------------------------------------
def _serve_one_kind(config: EngineConfig, default_params, inbox, outbox) -> None:
    """Worker process: an LLMEngine fed from `inbox` with (request_id, text, params or None); `None` stops it;
    text None asks for the counters. Replies (request_id, result), or (request_id, error text)."""
    engine = LLMEngine(config)
    outbox.put(("ready", None))
    while True:
        messages = [] if engine.has_unfinished() else [inbox.get()]
        with contextlib.suppress(queue.Empty):
            while True:
                messages.append(inbox.get_nowait())
        for message in messages:
            if message is None:
                return
            rid, text, params = message
            if text is None:
                outbox.put((rid, engine.get_stats()))
                continue
            try:
                engine.add_request(rid, text, replace(params or default_params))
            except Exception as err:  # a bad request fails alone
                outbox.put((rid, repr(err)))
        for out in engine.step():
            if out.finished:
                outbox.put((out.request_id, repr(out.error) if out.error else out.result))


class IsolatedBackend:
    """An embed-only and a generate-only `LLMEngine` in two processes. The embed process runs the co-located embedder
    or, with `embedder=backbone`, the generator's own layers; it also loads the generator, which it never runs for
    co-located embeddings."""

    def __init__(self, config: EngineConfig, sampling: SamplingParams, pooling: PoolingParams, threads: int):
        ctx = mp.get_context("spawn")
        self.outbox = ctx.Queue()
        self.inboxes = {"embed": ctx.Queue(), "generate": ctx.Queue()}
        configs = {"embed": replace(config, num_threads=threads),
                   "generate": replace(config, num_threads=threads, embedder=None)}
        params = {"embed": pooling, "generate": sampling}
        self.procs = {kind: ctx.Process(target=_serve_one_kind, daemon=True, name=f"bench-{kind}",
                                        args=(configs[kind], params[kind], self.inboxes[kind], self.outbox))
                      for kind in self.inboxes}
        for proc in self.procs.values():
            proc.start()
        self._wait_ready()
        self.futures: dict[str, concurrent.futures.Future] = {}
        self.ids = itertools.count()
        self.generator = config.generator
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _wait_ready(self, limit_s: float = 600.0) -> None:
        """Until both processes have loaded; one that exits first (a model that cannot load) fails at once."""
        ready, deadline = 0, time.monotonic() + limit_s
        while ready < len(self.procs):
            try:
                ready += self.outbox.get(timeout=1.0)[0] == "ready"
            except queue.Empty:
                dead = [f"{kind} (exit code {p.exitcode})" for kind, p in self.procs.items() if not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    for proc in self.procs.values():
                        proc.terminate()
                    raise RuntimeError(f"isolated mode: the {' and '.join(dead) or 'engine'} process "
                                       f"{'exited while loading (its error is above)' if dead else 'did not load'}")

    @functools.cached_property
    def tokenizer(self):
        """The generator's tokenizer, loaded in this process on first use (for chat templates)."""
        return load_tokenizer(self.generator)

    async def embed(self, text: str, params: PoolingParams | None = None) -> EmbedOutput:
        return await self._send("embed", text, params)

    async def generate(self, text: str, params: SamplingParams | None = None) -> GenerateOutput:
        return await self._send("generate", text, params)

    def stats(self) -> dict:
        """Each process's counters (a round trip to both; waits for their current steps)."""
        asked = {kind: self._post(kind, None) for kind in self.inboxes}
        return {kind: future.result(timeout=600) for kind, future in asked.items()}

    async def settled_stats(self) -> dict:
        return await asyncio.to_thread(self.stats)

    async def _send(self, kind: str, text: str, params=None):
        reply = await asyncio.wrap_future(self._post(kind, text, params))
        if isinstance(reply, str):
            raise RuntimeError(f"{kind} process failed request: {reply}")
        return reply

    def _post(self, kind: str, text: str | None, params=None) -> concurrent.futures.Future:
        rid = f"{kind}-{next(self.ids)}"
        self.futures[rid] = future = concurrent.futures.Future()
        self.inboxes[kind].put((rid, text, params))
        return future

    def _read(self) -> None:
        for rid, reply in iter(self.outbox.get, (None, None)):  # until close() posts (None, None)
            self.futures.pop(rid).set_result(reply)

    def close(self) -> None:
        for inbox in self.inboxes.values():
            inbox.put(None)
        for proc in self.procs.values():
            proc.join(timeout=60)
            if proc.is_alive():
                proc.terminate()
        self.outbox.put((None, None))
        self.reader.join(timeout=10)
        for q in [self.outbox, *self.inboxes.values()]:  # never let a queue's feeder thread hold up exit
            q.close()
            q.cancel_join_thread()


# ---- hf: transformers generate + sentence-transformers encode in one loop -------------------------------------
@dataclass
class _Call:
    text: str
    params: SamplingParams | PoolingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    arrival: float


class _FirstToken(BaseStreamer):
    """Notes when `generate` hands out its first new tokens (its first `put` is the prompt)."""

    puts, at = 0, None  # put calls so far; perf_counter at the second

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


class HFBackend:
    """A batch runs to completion before anything that arrived during it starts. Generate requests waiting together
    run as one `generate` call per distinct (max_tokens, stop, ignore_eos); greedy whatever the temperature. Stop
    strings end a row's text as in the engine; the batch runs until its last row stops. Every row of a batch shares
    its time to first token."""

    def __init__(self, config: EngineConfig, sampling: SamplingParams, pooling: PoolingParams):
        set_threads(config.num_threads)
        self.model, self.tokenizer = load_generator(config.generator, config.dtype, config.device)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = {*(eos if isinstance(eos, list) else [eos]), self.tokenizer.eos_token_id} - {None}
        on_backbone = pooling.model == "backbone" or not config.embedder
        self.encoder = None if on_backbone else load_embedder(config.embedder, config.dtype, config.device)
        self.embed_model = self.model
        if on_backbone and config.embedding_adapter:
            from peft import PeftModel

            # the engine applies the adapter to embedding rows only: here a second copy of the generator carries it
            copy, _ = load_generator(config.generator, config.dtype, config.device)
            self.embed_model = PeftModel.from_pretrained(copy, config.embedding_adapter).eval()
        self.sampling, self.pooling = sampling, pooling
        self.waiting: dict[str, list[_Call]] = {"embed": [], "generate": []}
        self.wake = threading.Condition()
        self.stopping = False
        self.ids = itertools.count()
        self.counts = {"generate_batches": 0, "embed_batches": 0, "generate_s": 0.0, "embed_s": 0.0}
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    async def embed(self, text: str, params: PoolingParams | None = None) -> EmbedOutput:
        return await self._submit("embed", text, params or self.pooling)

    async def generate(self, text: str, params: SamplingParams | None = None) -> GenerateOutput:
        return await self._submit("generate", text, params or self.sampling)

    def stats(self) -> dict:
        return dict(self.counts)

    async def settled_stats(self) -> dict:
        return self.stats()

    async def _submit(self, kind: str, text: str, params):
        loop = asyncio.get_running_loop()
        call = _Call(text, params, loop, loop.create_future(), time.perf_counter())
        with self.wake:
            self.waiting[kind].append(call)
            self.wake.notify()
        return await call.future

    def _loop(self) -> None:
        while True:
            with self.wake:
                self.wake.wait_for(lambda: self.stopping or any(self.waiting.values()))
                if self.stopping:
                    return
            for kind in ("generate", "embed"):
                with self.wake:
                    batch, self.waiting[kind] = self.waiting[kind], []
                for group in _groups(batch, kind):
                    self._run_batch(kind, group)

    def _run_batch(self, kind: str, batch: list[_Call]) -> None:
        start = time.perf_counter()
        try:
            results = self._generate(batch, start) if kind == "generate" else self._embed(batch, start)
        except Exception as err:  # fail this batch's callers rather than leave them waiting
            results = [err] * len(batch)
        self.counts[f"{kind}_batches"] += 1
        self.counts[f"{kind}_s"] += time.perf_counter() - start
        for call, result in zip(batch, results):
            settle = call.future.set_exception if isinstance(result, Exception) else call.future.set_result
            call.loop.call_soon_threadsafe(settle, result)

    @torch.inference_mode()
    def _generate(self, batch: list[_Call], start: float) -> list[GenerateOutput]:
        params: SamplingParams = batch[0].params
        inputs = self.tokenizer([c.text for c in batch], return_tensors="pt", padding=True).to(self.model.device)
        n, streamer = params.max_tokens, _FirstToken()
        extra = {"stop_strings": params.stop, "tokenizer": self.tokenizer} if params.stop else {}
        out = self.model.generate(**inputs, max_new_tokens=n, min_new_tokens=n if params.ignore_eos else 0,
                                  do_sample=False, pad_token_id=self.tokenizer.pad_token_id, streamer=streamer,
                                  **extra)
        new = out[:, inputs["input_ids"].shape[1]:].tolist()
        prompt_lens = inputs["attention_mask"].sum(1).tolist()
        rows = [self._finish_row(ids, params) for ids in new]
        return [GenerateOutput(f"hf-{next(self.ids)}", text, ids, reason, Usage(int(p), len(ids)),
                               RequestTimings(call.arrival, start, streamer.at, time.perf_counter()))
                for call, p, (text, ids, reason) in zip(batch, prompt_lens, rows)]

    def _finish_row(self, ids: list[int], params: SamplingParams) -> tuple[str, list[int], str]:
        """A row's text, kept tokens and finish reason, cut as the engine cuts: at EOS or a stop string."""
        if not params.ignore_eos:
            for i, token in enumerate(ids):
                if token in self.eos_ids or token in params.stop_token_ids:
                    return self._decode(ids[:i]), ids[:i + 1], "stop"
        for j in range(1, len(ids) + 1) if params.stop else ():
            text = self._decode(ids[:j])
            if hits := [i for s in params.stop if (i := text.find(s)) >= 0]:
                return text[:min(hits)], ids[:j], "stop"
        return self._decode(ids), ids, "length"

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @torch.inference_mode()
    def _embed(self, batch: list[_Call], start: float) -> list[EmbedOutput]:
        texts, normalize = [c.text for c in batch], batch[0].params.normalize
        if self.encoder is not None:
            vectors = self.encoder.encode(texts, batch_size=len(texts), normalize_embeddings=normalize,
                                          show_progress_bar=False, convert_to_numpy=True)
            counts = [len(ids) for ids in self.encoder.tokenizer(texts)["input_ids"]]
        else:
            cut = batch[0].params.truncate
            inputs = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=cut is not None,
                                    max_length=cut).to(self.model.device)
            hidden = backbone(self.embed_model)(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = ((hidden * mask).sum(1) / mask.sum(1)).float()
            vectors = (torch.nn.functional.normalize(pooled, dim=-1) if normalize else pooled).cpu().numpy()
            counts = inputs["attention_mask"].sum(1).tolist()
        return [EmbedOutput(f"hf-{next(self.ids)}", np.asarray(v, dtype=np.float32), int(k),
                            RequestTimings(c.arrival, start, finished=time.perf_counter()))
                for c, v, k in zip(batch, vectors, counts)]

    def close(self) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()
        self.thread.join()


def _groups(batch: list[_Call], kind: str) -> list[list[_Call]]:
    """Calls that can share one batched call: same generation limits and stops (or same normalisation)."""
    groups: dict[tuple, list[_Call]] = {}
    for call in batch:
        p = call.params
        key = (p.max_tokens, tuple(p.stop), p.ignore_eos, tuple(p.stop_token_ids)) if kind == "generate" \
            else (p.normalize, p.truncate)
        groups.setdefault(key, []).append(call)
    return list(groups.values())
