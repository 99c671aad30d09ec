"""The four ways of serving the same embed and generate requests that the benchmark compares.

Each backend offers `await embed(text)`, `await generate(text)`, `await stats()` and `close()`.

- `EngineBackend` (modes `hetero` and `alternating`): one `AsyncEngine` using every core; `alternating` is the same
  engine with `policy=alternating`, so a step never holds both kinds.
- `IsolatedBackend` (mode `isolated`): two processes, each an `LLMEngine` with half the cores, one serving only
  embed requests and one only generate requests; the CPU analogue of giving each model its own GPU. Both run the
  engine's own code (same kernels, same continuous batching), so the only difference from `hetero` is that the
  work is split by kind across processes. The embed process runs the co-located embedder or, with
  `embedder=backbone`, the generator's own layers; it also loads the generator, which it never runs for
  co-located embeddings.
- `HFBackend` (mode `hf`): what one would write without this project: a loop that alternately runs transformers
  `generate` (greedy, left padded) on all waiting generate requests and sentence-transformers `encode` on all
  waiting embed requests. A batch runs to completion before anything that arrived during it starts.
"""
from __future__ import annotations

import asyncio
import itertools
import multiprocessing as mp
import queue
import threading
import time
from dataclasses import replace

import torch

from orthrus_rag.engine import AsyncEngine, EngineConfig, LLMEngine, PoolingParams, SamplingParams
from orthrus_rag.models import load_embedder, load_generator, set_threads


class EngineBackend:
    def __init__(self, config: EngineConfig, sampling: SamplingParams, pooling: PoolingParams):
        self.engine = AsyncEngine(config)
        self.sampling, self.pooling = sampling, pooling

    async def embed(self, text: str) -> None:
        await self.engine.embed(text, replace(self.pooling))

    async def generate(self, text: str) -> None:
        await self.engine.generate(text, replace(self.sampling))

    async def stats(self) -> dict:
        """Counters once the engine is idle: `AsyncEngine.stats()` is refreshed after a step's results are
        delivered, so right after the last answer it can still miss that step."""
        for _ in range(500):
            stats = self.engine.stats()
            if not stats["running"] and not any(stats["waiting"].values()):
                break
            await asyncio.sleep(0.01)
        return stats

    def close(self) -> None:
        self.engine.shutdown()


# ---- isolated: one process per kind --------------------------------------------------------------------------
def _serve_one_kind(config: EngineConfig, params, inbox, outbox) -> None:
    """Worker process: an LLMEngine fed from `inbox` with (request_id, text); `None` stops it."""
    engine = LLMEngine(config)
    outbox.put(("ready", None))
    while True:
        messages = [] if engine.has_unfinished() else [inbox.get()]
        try:
            while True:
                messages.append(inbox.get_nowait())
        except queue.Empty:
            pass
        for message in messages:
            if message is None:
                return
            rid, text = message
            if text is None:
                outbox.put((rid, engine.get_stats()))
            else:
                engine.add_request(rid, text, replace(params))
        for out in engine.step():
            if out.finished:
                outbox.put((out.request_id, repr(out.error) if out.error else None))


class IsolatedBackend:
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
        for _ in self.procs:
            rid, _ = self.outbox.get(timeout=600)
            assert rid == "ready", rid
        self.futures: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self.ids = itertools.count()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    async def embed(self, text: str) -> None:
        await self._send("embed", text)

    async def generate(self, text: str) -> None:
        await self._send("generate", text)

    async def stats(self) -> dict:
        return {kind: await self._send(kind, None) for kind in self.inboxes}

    async def _send(self, kind: str, text: str | None):
        rid = f"{kind}-{next(self.ids)}"
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.futures[rid] = (loop, future)
        self.inboxes[kind].put((rid, text))
        reply = await future
        if isinstance(reply, str):
            raise RuntimeError(f"{kind} process failed request {rid}: {reply}")
        return reply

    def _read(self) -> None:
        while True:
            rid, reply = self.outbox.get()
            if rid is None:
                return
            loop, future = self.futures.pop(rid)
            loop.call_soon_threadsafe(future.set_result, reply)

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
class HFBackend:
    def __init__(self, config: EngineConfig, sampling: SamplingParams, pooling: PoolingParams):
        set_threads(config.num_threads)
        self.model, self.tokenizer = load_generator(config.generator, config.dtype, config.device)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        on_backbone = pooling.model == "backbone" or not config.embedder
        self.encoder = None if on_backbone else load_embedder(config.embedder, config.dtype, config.device)
        self.sampling, self.pooling = sampling, pooling
        self.waiting: dict[str, list] = {"embed": [], "generate": []}
        self.wake = threading.Condition()
        self.stopping = False
        self.counts = {"generate_batches": 0, "embed_batches": 0, "generate_s": 0.0, "embed_s": 0.0}
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    async def embed(self, text: str) -> None:
        await self._submit("embed", text)

    async def generate(self, text: str) -> None:
        await self._submit("generate", text)

    async def stats(self) -> dict:
        return dict(self.counts)

    async def _submit(self, kind: str, text: str) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.wake:
            self.waiting[kind].append((text, loop, future))
            self.wake.notify()
        await future

    def _loop(self) -> None:
        while True:
            with self.wake:
                while not self.stopping and not any(self.waiting.values()):
                    self.wake.wait()
                if self.stopping:
                    return
            for kind, run in (("generate", self._generate), ("embed", self._embed)):
                with self.wake:
                    batch, self.waiting[kind] = self.waiting[kind], []
                if batch:
                    self._run_batch(kind, run, batch)

    def _run_batch(self, kind: str, run, batch: list) -> None:
        start = time.perf_counter()
        try:
            run([text for text, _, _ in batch])
            error = None
        except Exception as err:  # fail this batch's callers rather than leave them waiting
            error = err
        self.counts[f"{kind}_batches"] += 1
        self.counts[f"{kind}_s"] += time.perf_counter() - start
        for _, loop, future in batch:
            if error is None:
                loop.call_soon_threadsafe(future.set_result, None)
            else:
                loop.call_soon_threadsafe(future.set_exception, error)

    @torch.inference_mode()
    def _generate(self, texts: list[str]) -> None:
        batch = self.tokenizer(texts, return_tensors="pt", padding=True).to(self.model.device)
        n = self.sampling.max_tokens
        self.model.generate(**batch, max_new_tokens=n, min_new_tokens=n if self.sampling.ignore_eos else 0,
                            do_sample=False, pad_token_id=self.tokenizer.pad_token_id)

    @torch.inference_mode()
    def _embed(self, texts: list[str]) -> None:
        if self.encoder is not None:
            self.encoder.encode(texts, batch_size=len(texts), normalize_embeddings=self.pooling.normalize,
                                show_progress_bar=False)
            return
        batch = self.tokenizer(texts, return_tensors="pt", padding=True).to(self.model.device)
        hidden = self.model.base_model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        vectors = (hidden * mask).sum(1) / mask.sum(1)
        if self.pooling.normalize:
            torch.nn.functional.normalize(vectors.float(), dim=-1)

    def close(self) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()
        self.thread.join()
