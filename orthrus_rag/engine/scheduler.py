"""The scheduler: which rows run in the next step, under `max_num_batched_tokens` and `max_num_seqs`. The order of
placement, queues passed over and co-located embeddings over the budget: docs/engine.md (its steps, "Preemption by
recompute", "Composition policies").

The scheduler is the only owner of a sequence's life cycle (the engine reads results and asks it to finish):

    add ──> WAITING ──schedule──> RUNNING ──finish (stop, length, pooled, error)──> FINISHED
               ^                     │
               └──── preempt ────────┘        abort / error: WAITING or RUNNING ──finish──> FINISHED

It alone writes `status`, `num_computed`, `num_cached`, `finish_reason`, `pool_state` and `timings.first_scheduled`;
block tables change only through the block manager it calls.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from orthrus_rag.engine.batch import Install, ScheduledChunk, SchedulerOutput, rows
from orthrus_rag.engine.block_manager import BlockManager
from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.errors import QueueFullError
from orthrus_rag.engine.passage_store import PassageStore
from orthrus_rag.engine.policy import KINDS, Policy, QueueView
from orthrus_rag.engine.pooler import PoolState
from orthrus_rag.engine.request import FinishReason
from orthrus_rag.engine.sequence import Kind, Sequence, Status


@dataclass
class Budget:
    tokens: float
    seqs: int

    def take(self, tokens: float) -> None:
        self.tokens -= tokens
        self.seqs -= 1


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager, policy: Policy, store: PassageStore | None = None):
        self.config, self.blocks, self.policy, self.store = config, blocks, policy, store
        self.waiting: dict[Kind, OrderedDict[str, Sequence]] = {k: OrderedDict() for k in KINDS}
        self.running: dict[str, Sequence] = {}  # admitted backbone sequences, in admission order

    @property
    def num_waiting(self) -> int:
        return sum(len(q) for q in self.waiting.values())

    # ---- life cycle -----------------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        if self.num_waiting >= self.config.max_waiting:
            raise QueueFullError(f"the waiting queue is full ({self.config.max_waiting} requests); retry later or "
                                 "raise runtime.max_waiting")
        self.waiting[seq.kind][seq.request_id] = seq

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Drop a request wherever it is (done, aborted, failed) and free what it holds. O(1)."""
        self.waiting[seq.kind].pop(seq.request_id, None)
        self.running.pop(seq.request_id, None)
        self.blocks.free_sequence(seq)
        seq.pool_state = None
        seq.status, seq.finish_reason = Status.FINISHED, seq.finish_reason or reason

    def advance(self, sched: SchedulerOutput, gen_s: float, emb_s: float) -> None:
        """After the forward pass: count the computed tokens, name newly full KV blocks, feed the cost model."""
        for chunk in sched.chunks:
            chunk.seq.num_computed += chunk.num_tokens
            if chunk.seq.kind == "generate":
                self.blocks.commit(chunk.seq)
        emb_tokens = sum(s.num_tokens for s in sched.embedder_seqs)
        self.policy.observe(sched.num_backbone_tokens, gen_s, emb_tokens, emb_s)

    # ---- one step -------------------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = Budget(self.config.max_num_batched_tokens, self.config.max_num_seqs)
        self.policy.begin_step(self._view(out))
        running = sorted(self.running.values(), key=lambda s: s.arrival_seq)
        for seq in [s for s in running if s.is_decode]:
            self._place_running(seq, 1, out, budget)
        for seq in [s for s in running if not s.is_decode]:
            self._place_running(seq, min(seq.num_remaining, int(budget.tokens)), out, budget)
        view = self._view(out)
        self.policy.plan(view)
        self._admit(out, budget, view)
        out.chunks.sort(key=lambda c: c.seq.kind == "embed")  # backbone embedding rows last (adapter segment)
        now = time.perf_counter()
        for seq in [c.seq for c in out.chunks] + out.embedder_seqs:
            seq.timings.first_scheduled = seq.timings.first_scheduled or now
        return out

    def _place_running(self, seq: Sequence, n: int, out: SchedulerOutput, budget: Budget) -> None:
        if seq.request_id not in self.running or not 0 < n <= budget.tokens or budget.seqs <= 0 \
                or not self.policy.allows(seq.kind):
            return
        recompute = []
        if seq.passages and self.store is not None:
            recompute = self._install_reached(seq, out, n)
            n = self._up_to_stored(seq, min(n - rows(recompute), seq.num_remaining))
        if seq.block_table and not self._allocate(seq, n, out, budget):
            return
        chunk = ScheduledChunk(seq, n, recompute)
        out.chunks.append(chunk)
        budget.take(chunk.num_rows)

    def _allocate(self, seq: Sequence, n: int, out: SchedulerOutput, budget: Budget) -> bool:
        """Blocks for n more tokens, preempting running requests that arrived after `seq` while short; when none
        is left, `seq` itself yields its blocks and waits."""
        while not self.blocks.allocate(seq, n):
            newer = [s for s in self.running.values() if s.arrival_seq > seq.arrival_seq and s.block_table]
            victim = max(newer, key=lambda s: s.arrival_seq) if newer else seq
            self._preempt(victim, out, budget)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput, budget: Budget) -> None:
        placed = next((c for c in out.chunks if c.seq is seq), None)
        if placed is not None:  # evicted after it was placed in this step: take it out again
            out.chunks.remove(placed)
            budget.tokens += placed.num_rows
            budget.seqs += 1
        del self.running[seq.request_id]
        self._reset(seq, out)
        self.waiting[seq.kind][seq.request_id] = seq
        self.waiting[seq.kind].move_to_end(seq.request_id, last=False)
        out.preempted.append(seq)

    def _reset(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.blocks.free_sequence(seq)
        seq.num_computed, seq.pool_state, seq.status = 0, None, Status.WAITING
        seq.reused_from, seq.num_reused, seq.num_recomputed = None, 0, 0
        out.installs = [i for i in out.installs if i.seq is not seq]

    def _admit(self, out: SchedulerOutput, budget: Budget, view: QueueView) -> None:
        evicted = {s.request_id for s in out.preempted}
        free = budget.tokens  # the room running work left
        while budget.seqs > 0 and budget.tokens > 0:
            kind = self.policy.choose(view)
            if kind is None:
                break
            seq = next(iter(self.waiting[kind].values()))
            used = None if seq.request_id in evicted else \
                self._admit_one(seq, out, budget, min(budget.tokens, self.policy.room(view)), free)
            if used is None:  # this queue cannot start its head now: pass it over for this step
                view.head_arrival[kind] = None
                continue
            view.new_tokens[kind] += used
            view.head_arrival[kind] = self._head_arrival(kind)

    def _admit_one(self, seq: Sequence, out: SchedulerOutput, budget: Budget, room: float,
                   free: float) -> float | None:
        """Start `seq` in this step; returns the budget it used, or None when it cannot start now. A co-located
        embedding (never chunked) that costs more than the room `free` running work left runs over the budget."""
        if not seq.on_backbone:
            cost = math.ceil(seq.num_tokens * self.policy.embed_ratio)
            if budget.tokens < cost <= free:  # new work took the room it fits in: wait for a later step
                return None
            self._start(seq)
            out.embedder_seqs.append(seq)
            budget.take(cost)
            return cost
        if seq.waits_for and not self._stored_first(seq):
            return None
        hits = 0
        if seq.kind == "generate":
            seq.num_computed = hits = self.blocks.acquire_prefix(seq)
        recompute = self._install_reached(seq, out, int(room)) if seq.passages and self.store is not None else []
        n = self._up_to_stored(seq, int(min(seq.num_remaining, room - rows(recompute))))
        needs_kv = seq.kind == "generate" or n < seq.num_remaining
        if n <= 0 or (needs_kv and not self.blocks.allocate(seq, n)):
            self._reset(seq, out)
            return None
        self._start(seq)
        if seq.kind == "generate":
            self.blocks.hits += hits
            seq.num_cached = min(hits, len(seq.prompt_ids))
        else:
            seq.pool_state = PoolState(seq.pooling.pooling)
        chunk = ScheduledChunk(seq, n, recompute)
        out.chunks.append(chunk)
        budget.take(chunk.num_rows)
        return chunk.num_rows

    def _stored_first(self, seq: Sequence) -> bool:
        """Whether the requests storing `seq`'s passages have all finished (it then starts and installs them)."""
        seq.waits_for = {r for r in seq.waits_for if r in self.running or r in self.waiting["generate"]}
        return not seq.waits_for

    def _install_reached(self, seq: Sequence, out: SchedulerOutput, room: int) -> list[tuple[int, int]]:
        """Place the stored passages that start where `seq` has computed to: their KV is copied in, not computed.
        Under `blend` the first tokens of each are computed again in this step: the runs returned, which leave at
        least one row of `room` for the chunk after them."""
        recompute: list[tuple[int, int]] = []
        for start, end, key in seq.passages:
            again = math.ceil((end - start) * self.config.passage_recompute) \
                if self.config.passage_reuse == "blend" else 0
            if start != seq.num_computed or key not in self.store or rows(recompute) + again >= room \
                    or not self.blocks.allocate(seq, end - start):
                continue
            out.installs.append(Install(seq, start, end, key, again))
            recompute += [(start, start + again)] if again else []
            seq.reused_from = start if seq.reused_from is None else seq.reused_from
            seq.num_reused += end - start - again
            seq.num_recomputed += again
            seq.num_computed = end
        return recompute

    def _up_to_stored(self, seq: Sequence, n: int) -> int:
        """`n`, cut where the next stored passage of `seq` starts (the next step installs it)."""
        if not seq.passages or self.store is None:
            return n
        starts = [s for s, _, key in seq.passages if s > seq.num_computed and key in self.store]
        return min([n, *(s - seq.num_computed for s in starts)])

    def _start(self, seq: Sequence) -> None:
        del self.waiting[seq.kind][seq.request_id]
        seq.status = Status.RUNNING
        if seq.on_backbone:
            self.running[seq.request_id] = seq

    def _head_arrival(self, kind: Kind) -> int | None:
        queue = self.waiting[kind]
        return next(iter(queue.values())).arrival_seq if queue else None

    def _view(self, out: SchedulerOutput) -> QueueView:
        ratio = self.policy.embed_ratio  # co-located embedder tokens in generator tokens
        return QueueView(
            head_arrival={k: self._head_arrival(k) for k in KINDS},
            pending_tokens={k: sum(s.num_remaining * (1.0 if s.on_backbone else ratio) for s in queue.values())
                            for k, queue in self.waiting.items()},
            running={k: sum(1 for s in self.running.values() if s.kind == k) for k in KINDS},
            placed_tokens=out.num_backbone_tokens,
            decodes=sum(1 for c in out.chunks if c.is_decode),
        )
