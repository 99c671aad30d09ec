"""The synchronous engine core: `add_request` queues work, `step` runs one heterogeneous batch (what a step does:
docs/engine.md)."""
from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from orthrus_rag.engine.batch import ModelOutput, ScheduledChunk, SchedulerOutput
from orthrus_rag.engine.block_manager import BlockManager, slots
from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.embedder_runner import EmbedderRunner
from orthrus_rag.engine.errors import InvalidRequestError
from orthrus_rag.engine.model_runner import ModelRunner
from orthrus_rag.engine.output import StepOutput, append_token, embed_output, generate_output, take_delta
from orthrus_rag.engine.passage_store import PassageStore, spans_of
from orthrus_rag.engine.policy import make_policy
from orthrus_rag.engine.rope import KeyRotation
from orthrus_rag.engine.protocol import Prompt
from orthrus_rag.engine.request import FinishReason, PoolingParams, RequestTimings, SamplingParams
from orthrus_rag.engine.sampler import make_generator, sample, sample_batch
from orthrus_rag.engine.scheduler import Scheduler
from orthrus_rag.engine.sequence import Kind, Sequence
from orthrus_rag.engine.step_log import StepLog, StepRecord
from orthrus_rag.engine.tokenize import encode_text


@dataclass
class PreparedRequest:
    """A request checked and tokenised, ready to queue."""

    kind: Kind
    ids: list[int]
    params: SamplingParams | PoolingParams


@dataclass
class EngineStats:
    steps: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: {"decode": 0, "prefill": 0, "embed": 0})
    generator_s: float = 0.0
    embedder_s: float = 0.0
    preemptions: int = 0
    mixed_steps: int = 0  # steps holding both generation and embedding work

    def record_step(self, sched: SchedulerOutput, gen_s: float, emb_s: float) -> dict[str, int]:
        """Count one step; returns its tokens by kind."""
        counts = {"decode": 0, "prefill": 0, "embed": sum(s.num_tokens for s in sched.embedder_seqs)}
        for c in sched.chunks:
            counts["embed" if c.seq.kind == "embed" else "decode" if c.is_decode else "prefill"] += c.num_rows
        self.steps += 1
        for kind, n in counts.items():
            self.tokens[kind] += n
        self.generator_s += gen_s
        self.embedder_s += emb_s
        self.preemptions += len(sched.preempted)
        self.mixed_steps += bool(counts["embed"]) and bool(counts["decode"] + counts["prefill"])
        return counts


class LLMEngine:
    def __init__(self, config: EngineConfig):
        policy = make_policy(config)
        self.config = config
        self.runner = ModelRunner(config)
        self.tokenizer = self.runner.tokenizer
        self.embedder = EmbedderRunner(config.embedder, self.runner.dtype, self.runner.device, config.load_format) \
            if config.embedder else None
        self.blocks = BlockManager(self.runner.num_kv_blocks, config.block_size, config.enable_prefix_caching)
        self.store = self._passage_store(config)
        self.scheduler = Scheduler(config, self.blocks, policy, self.store)
        self.storing: dict[bytes, str] = {}  # passage key -> the internal request computing it
        self.internal: set[str] = set()  # ids of the requests the engine queued itself
        self.requests: dict[str, Sequence] = {}
        self.generators: dict[str, torch.Generator | None] = {}
        self.eos_ids = _eos_ids(self.runner.model, self.tokenizer)
        self.vocab_size = min(len(self.tokenizer), self.runner.model.get_input_embeddings().num_embeddings)
        self.stats = EngineStats()
        self.step_log = StepLog(config.step_log_size)
        self._arrivals = itertools.count()
        self._internal_ids = itertools.count()  # never reused: a waiting request names the ones it waits for

    # ---- requests -------------------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: Prompt, params: SamplingParams | PoolingParams) -> None:
        """Validate, set up and queue a request; after an InvalidRequestError or QueueFullError nothing is queued."""
        self.add_prepared(request_id, self.prepare(prompt, params))

    def prepare(self, prompt: Prompt, params: SamplingParams | PoolingParams) -> PreparedRequest:
        """Validate and tokenise a request without touching engine state, so any thread may call it (AsyncEngine
        does it on the caller's side: a huge prompt costs its own caller, not the engine's steps)."""
        if not isinstance(params, (SamplingParams, PoolingParams)):
            raise InvalidRequestError("params must be SamplingParams (generate) or PoolingParams (embed)", "params")
        params.validate()
        kind = "generate" if isinstance(params, SamplingParams) else "embed"
        if kind == "embed" and params.model is None and self.embedder is None:
            params.model = "backbone"
        on_backbone = kind == "generate" or params.model == "backbone"
        ids = self._tokenize(prompt, on_backbone)
        if kind == "embed" and params.truncate is not None:
            ids = ids[:params.truncate]
        if on_backbone:
            self._check_length(ids, params)
        if kind == "generate" and params.passage_spans and params.passage_spans[-1][1] >= len(ids):
            raise InvalidRequestError(f"passage_spans must end before the prompt's last token ({len(ids)} tokens); "
                                      f"the last ends at {params.passage_spans[-1][1]}", "passage_spans")
        return PreparedRequest(kind, ids, params)

    def add_prepared(self, request_id: str, request: PreparedRequest) -> None:
        """Queue a prepared request; after an InvalidRequestError (id in use) or QueueFullError nothing is queued."""
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use", "request_id")
        generate = request.kind == "generate"
        seq = Sequence(request_id, request.kind, request.ids, RequestTimings(time.perf_counter()),
                       next(self._arrivals), sampling=request.params if generate else None,
                       pooling=None if generate else request.params)
        if generate and self.store is not None and request.params.passage_spans:
            seq.passages = spans_of(request.ids, request.params.passage_spans)
            seq.waits_for = self._store_passages(seq)
        self.scheduler.add(seq)
        self.requests[request_id] = seq
        self.generators[request_id] = make_generator(request.params) if generate else None

    def _store_passages(self, seq: Sequence) -> set[str]:
        """Queue, for each passage of `seq` after its first that is neither stored nor being stored, a request that
        computes it after the preamble (the first such one first, so the rest find the preamble cached); returns
        the requests `seq` waits for."""
        preamble = seq.prompt_ids[:seq.passages[0][0]]
        waits, first = set(), None
        for start, end, key in seq.passages[1:]:
            if key not in self.store and key not in self.storing:
                rid = next(r for r in (f"passage-{i}" for i in self._internal_ids) if r not in self.requests)
                store = Sequence(rid, "generate", preamble + seq.prompt_ids[start:end],
                                 RequestTimings(time.perf_counter()), next(self._arrivals),
                                 sampling=SamplingParams(max_tokens=1),
                                 passages=[(len(preamble), len(preamble) + end - start, key)],
                                 waits_for={first} if first else set())
                self.scheduler.add(store)
                self.requests[rid], self.generators[rid], self.storing[key] = store, None, rid
                self.internal.add(rid)
                first = first or rid
            if key in self.storing:
                waits.add(self.storing[key])
        return waits

    def abort(self, request_id: str) -> bool:
        """Drop a request and free its blocks and pooling state. False when it is unknown or already done."""
        seq = self.requests.get(request_id)
        if seq is not None:
            self._release(seq, "abort")
        return seq is not None

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    # ---- one step -------------------------------------------------------------------------------------------
    def step(self, early: Callable[[StepOutput], None] | None = None) -> list[StepOutput]:
        """Run one step. The co-located embedder runs first; with `early`, its results are handed to that
        callback at once (before the generator's forward pass) instead of being returned. A failure while
        producing one request's output fails that request only."""
        started = time.perf_counter()
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return []
        return [out for out in self._step(sched, started, early) if not self._internal(out)]

    def _step(self, sched: SchedulerOutput, started: float, early) -> list[StepOutput]:
        outputs, emb_s = self._embedder_outputs(sched)
        if early is not None:
            for out in outputs:
                early(out)
            outputs = []
        try:
            self._install(sched)
            model_out, gen_s = self._run_generator(sched)
        except Exception as err:  # a failing forward fails the rows of this step only
            return outputs + [self._fail(c.seq, err) for c in sched.chunks]
        self.scheduler.advance(sched, gen_s, emb_s)
        self._capture(sched)
        counts = self.stats.record_step(sched, gen_s, emb_s)
        outputs += [o for c in sched.chunks if (o := self._contained(c.seq, self._chunk_output, c, model_out))]
        if self.step_log.size:
            self.step_log.append(self._step_record(sched, counts, time.perf_counter() - started, gen_s, emb_s))
        return outputs

    def _install(self, sched: SchedulerOutput) -> None:
        """Copy the stored passages the scheduler placed into their sequences' slots."""
        for placed in sched.installs:
            where = self._slots(placed.seq, placed.start, placed.end)
            self.store.install(self.runner.cache, where, placed.key, placed.start, placed.recomputed)

    def _capture(self, sched: SchedulerOutput) -> None:
        """Store each first passage computed exactly in this step (it follows the preamble directly)."""
        for chunk in sched.chunks if self.store is not None else []:
            seq = chunk.seq
            if not seq.passages or seq.reused_from is not None:
                continue
            start, end, key = seq.passages[0]
            if chunk.start < end <= seq.num_computed and key not in self.store:
                self.store.capture(self.runner.cache, self._slots(seq, start, end), key, start)

    def _slots(self, seq: Sequence, start: int, end: int) -> torch.Tensor:
        return torch.tensor(slots(seq.block_table, self.config.block_size, start, end), dtype=torch.long,
                            device=self.runner.device)

    def _internal(self, out: StepOutput) -> bool:
        """Whether `out` belongs to a request the engine queued to store a passage (never shown to callers)."""
        if out.request_id not in self.internal:
            return False
        if out.finished:
            self.internal.discard(out.request_id)
            self.storing = {k: r for k, r in self.storing.items() if r != out.request_id}
        return True

    def _step_record(self, sched: SchedulerOutput, counts: dict[str, int], step_s: float, gen_s: float,
                     emb_s: float) -> StepRecord:
        """What this step held and left behind, for the step log (a few counts the step already has)."""
        blocks, again = self.blocks, sum(i.recomputed for i in sched.installs)
        return StepRecord(self.step_log.next_id, time.time(), step_s, gen_s, emb_s, counts,
                          sum(seq.num_tokens for seq in sched.embedder_seqs), len(self.scheduler.running),
                          {kind: len(q) for kind, q in self.scheduler.waiting.items()},
                          blocks.num_blocks - blocks.num_free, blocks.num_blocks,
                          sum(i.end - i.start for i in sched.installs) - again, again)

    def _contained(self, seq: Sequence, fn: Callable[..., StepOutput | None], *args) -> StepOutput | None:
        """`fn(*args)`, or the request's failure when it raises."""
        try:
            return fn(*args)
        except Exception as err:
            return self._fail(seq, err)

    def _embedder_outputs(self, sched: SchedulerOutput) -> tuple[list[StepOutput], float]:
        start = time.perf_counter()
        try:
            vectors = self.embedder.embed(sched.embedder_seqs) if sched.embedder_seqs else {}
            self.runner.synchronize()
        except Exception as err:
            return [self._fail(seq, err) for seq in sched.embedder_seqs], 0.0
        emb_s = time.perf_counter() - start  # the embedder's run alone: the policy's cost model reads it
        return [self._contained(seq, self._finish_embedding, seq, vectors[seq.request_id])
                for seq in sched.embedder_seqs], emb_s

    def _run_generator(self, sched: SchedulerOutput) -> tuple[ModelOutput, float]:
        start = time.perf_counter()
        out = self.runner.execute(sched.chunks) if sched.chunks else ModelOutput()
        if out.logit_ids:  # every sampling row at once; should that fail, `_chunk_output` samples row by row
            with contextlib.suppress(Exception):
                out.tokens = dict(zip(out.logit_ids, sample_batch(out.logits,
                                                                  [self.requests[r].sampling for r in out.logit_ids],
                                                                  [self.generators[r] for r in out.logit_ids])))
        self.runner.synchronize()  # the policy's cost model needs the step's real time, not its launch time
        return out, time.perf_counter() - start

    def _chunk_output(self, chunk: ScheduledChunk, out: ModelOutput) -> StepOutput | None:
        seq = chunk.seq
        if seq.kind == "embed":
            seq.pool_state.update(out.hidden[seq.request_id], chunk.start == 0)
            return self._finish_embedding(seq, seq.pool_state.result(seq.pooling.normalize)) \
                if chunk.completes else None
        if not chunk.completes:
            return None
        rid = seq.request_id
        token = out.tokens[rid] if out.tokens else sample(out.logits[out.logit_ids.index(rid)], seq.sampling,
                                                          self.generators[rid])
        reason = append_token(seq, token, self.tokenizer, self.eos_ids)
        if reason is None:
            return StepOutput(rid, take_delta(seq), [token])
        self._release(seq, reason)  # records the finish reason, which the last delta and the result read
        return StepOutput(rid, take_delta(seq), [token], finished=True, result=generate_output(seq))

    def _finish_embedding(self, seq: Sequence, vector: torch.Tensor) -> StepOutput:
        result = embed_output(seq, vector)
        self._release(seq, "stop")
        return StepOutput(seq.request_id, finished=True, result=result)

    def _fail(self, seq: Sequence, err: Exception) -> StepOutput:
        self._release(seq, "abort")
        return StepOutput(seq.request_id, finished=True, error=err)

    def _release(self, seq: Sequence, reason: FinishReason) -> None:
        self.scheduler.finish(seq, reason)
        self.requests.pop(seq.request_id, None)
        self.generators.pop(seq.request_id, None)

    def _passage_store(self, config: EngineConfig) -> PassageStore | None:
        """The passage KV store for `passage_reuse=blend` or `full_reuse`, or None; an error naming the setting where
        this model or cache cannot move KV."""
        if config.passage_reuse == "exact":
            return None
        try:
            rotation = KeyRotation(self.runner.model)
            self.runner.cache.read(0, torch.zeros(1, dtype=torch.long, device=self.runner.device))
        except (ValueError, NotImplementedError) as err:
            raise InvalidRequestError(f"runtime.passage_reuse={config.passage_reuse} cannot run here: {err} "
                                      f"(attention backend {self.runner.attention.name}); set "
                                      "runtime.passage_reuse=exact", "passage_reuse") from None
        return PassageStore(config.passage_store_tokens, rotation)

    # ---- validation -----------------------------------------------------------------------------------------
    def _tokenize(self, prompt: Prompt, on_backbone: bool) -> list[int]:
        if isinstance(prompt, str):
            return encode_text(self.tokenizer.encode if on_backbone else self.embedder.tokenize, prompt)
        if not isinstance(prompt, (list, tuple)) or not prompt:
            raise InvalidRequestError("the input must be a non-empty string or a non-empty list of token ids", "input")
        vocab = self.vocab_size if on_backbone else self.embedder.vocab_size
        if any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab for t in prompt):
            raise InvalidRequestError(f"token ids must be integers in [0, {vocab})", "input")
        return list(prompt)

    def _check_length(self, ids: list[int], params) -> None:
        limit = self.runner.max_model_len
        extra = params.max_tokens if isinstance(params, SamplingParams) else 0
        if len(ids) + extra > limit:
            what = f"the input ({len(ids)} tokens)" + (f" plus max_tokens ({extra})" if extra else "")
            raise InvalidRequestError(f"{what} exceeds the model's context length of {limit} tokens; "
                                      "shorten the input or lower max_tokens", "input")
        if -(-(len(ids) + extra) // self.config.block_size) > self.blocks.num_blocks:
            raise InvalidRequestError(f"the request needs more KV blocks than the pool holds "
                                      f"({self.blocks.num_blocks}); raise runtime.num_kv_blocks", "input")

    # ---- introspection --------------------------------------------------------------------------------------
    def get_stats(self) -> dict:
        stats, blocks = self.stats, self.blocks
        return {
            "steps": stats.steps,
            "mixed_steps": stats.mixed_steps,
            "tokens": dict(stats.tokens),
            "generator_s": round(stats.generator_s, 4),
            "embedder_s": round(stats.embedder_s, 4),
            "preemptions": stats.preemptions,
            "prefix_cache_hit_tokens": blocks.hits,
            "passage_store": self.store.stats() if self.store is not None else None,
            "waiting": {k: len(q) for k, q in self.scheduler.waiting.items()},
            "running": len(self.scheduler.running),
            "kv_blocks_total": blocks.num_blocks,
            "kv_blocks_used": blocks.num_blocks - blocks.num_free,
            "policy": self.scheduler.policy.name,
            "attention_backend": self.runner.attention.name,
            "attention_choice": self.runner.attention_choice.stats(),
            "dtype": str(self.runner.dtype).removeprefix("torch."),
        }


def _eos_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id if model.generation_config else None
    ids = ids if isinstance(ids, list) else [ids]
    return {i for i in ids + [tokenizer.eos_token_id] if i is not None}
