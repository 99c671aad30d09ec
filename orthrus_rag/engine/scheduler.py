"""The scheduler: which rows run in the next step, under `max_num_batched_tokens` and `max_num_seqs`.

Order of placement: (1) running decodes, oldest first, so a long prefill never stalls them; (2) unfinished chunks
of running prompts and backbone embeddings; (3) new requests, the composition policy choosing the queue. Long
prompts and long backbone embedding inputs are cut into chunks across steps. When KV blocks run out, the newest
running request is preempted by recompute: its blocks are freed and it waits again at the head of its queue with
its tokens kept, so it later produces exactly what it would have.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from orthrus_rag.engine.batch import ScheduledChunk, SchedulerOutput
from orthrus_rag.engine.block_manager import BlockManager
from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.errors import QueueFullError
from orthrus_rag.engine.policy import KINDS, Policy, QueueView
from orthrus_rag.engine.pooler import PoolState
from orthrus_rag.engine.sequence import Kind, Sequence, Status


@dataclass
class Budget:
    tokens: float
    seqs: int

    def take(self, tokens: float) -> None:
        self.tokens -= tokens
        self.seqs -= 1


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager, policy: Policy):
        self.config, self.blocks, self.policy = config, blocks, policy
        self.waiting: dict[Kind, deque[Sequence]] = {k: deque() for k in KINDS}
        self.running: list[Sequence] = []  # admitted, in arrival order
        self.embed_ratio = lambda: 1.0  # co-located embedder cost per token, in generator tokens

    @property
    def num_waiting(self) -> int:
        return sum(len(q) for q in self.waiting.values())

    def add(self, seq: Sequence) -> None:
        if self.num_waiting >= self.config.max_waiting:
            raise QueueFullError(f"the waiting queue is full ({self.config.max_waiting} requests); retry later or "
                                 "raise runtime.max_waiting")
        self.waiting[seq.kind].append(seq)

    def remove(self, seq: Sequence) -> None:
        """Drop a request wherever it is (abort, error) and free what it holds."""
        if seq in self.waiting[seq.kind]:
            self.waiting[seq.kind].remove(seq)
        if seq in self.running:
            self.running.remove(seq)
        self.blocks.free_sequence(seq)
        seq.pool_state = None

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = Budget(self.config.max_num_batched_tokens, self.config.max_num_seqs)
        self.policy.begin_step(self._view(out))
        scheduled: set[str] = set()
        for seq in [s for s in self.running if s.is_decode]:
            self._place_running(seq, 1, out, budget, scheduled)
        for seq in [s for s in self.running if not s.is_decode]:
            self._place_running(seq, min(seq.num_remaining, int(budget.tokens)), out, budget, scheduled)
        view = self._view(out)
        self.policy.plan(view)
        self._admit(out, budget, view)
        out.chunks.sort(key=lambda c: c.seq.kind == "embed")  # backbone embedding rows last (adapter segment)
        return out

    def _place_running(self, seq: Sequence, n: int, out: SchedulerOutput, budget: Budget, scheduled: set) -> None:
        if seq not in self.running or not 0 < n <= budget.tokens or budget.seqs <= 0 \
                or not self.policy.allows(seq.kind):
            return
        if seq.block_table and not self._allocate(seq, n, out, scheduled):
            return
        out.chunks.append(ScheduledChunk(seq, n))
        scheduled.add(seq.request_id)
        budget.take(n)

    def _allocate(self, seq: Sequence, n: int, out: SchedulerOutput, scheduled: set) -> bool:
        """Blocks for n more tokens, preempting the newest unscheduled running request while short."""
        while not self.blocks.allocate(seq, n):
            victims = [s for s in self.running if s.request_id not in scheduled and s.block_table]
            victim = max(victims, key=lambda s: s.arrival_seq) if victims else seq
            self._preempt(victim, out)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.blocks.free_sequence(seq)
        seq.num_computed, seq.pool_state, seq.status = 0, None, Status.WAITING
        self.waiting[seq.kind].appendleft(seq)
        out.preempted.append(seq)

    def _admit(self, out: SchedulerOutput, budget: Budget, view: QueueView) -> None:
        while budget.seqs > 0 and budget.tokens > 0:
            kind = self.policy.choose(view)
            if kind is None:
                break
            seq = self.waiting[kind][0]
            used = self._admit_one(seq, out, budget, min(budget.tokens, self.policy.room(view)))
            if used is None:
                break
            view.new_tokens[kind] += used
            view.head_arrival[kind] = self.waiting[kind][0].arrival_seq if self.waiting[kind] else None

    def _admit_one(self, seq: Sequence, out: SchedulerOutput, budget: Budget, room: float) -> float | None:
        """Start `seq` in this step; returns the budget it used, or None when it cannot start now."""
        if not seq.on_backbone:
            cost = math.ceil(seq.num_tokens * self.embed_ratio())
            if cost > budget.tokens and (out.chunks or out.embedder_seqs):
                return None
            self._start(seq)
            out.embedder_seqs.append(seq)
            budget.take(cost)
            return cost
        if seq.kind == "generate":
            self.blocks.acquire_prefix(seq)
        n = int(min(seq.num_remaining, room))
        if n <= 0:
            self.blocks.free_sequence(seq)
            seq.num_computed = 0
            return None
        needs_kv = seq.kind == "generate" or n < seq.num_remaining
        if needs_kv and not self.blocks.allocate(seq, n):
            self.blocks.free_sequence(seq)
            seq.num_computed = 0
            return None
        self._start(seq)
        if seq.kind == "embed":
            seq.pool_state = PoolState(seq.pooling.pooling)
        out.chunks.append(ScheduledChunk(seq, n))
        budget.take(n)
        return n

    def _start(self, seq: Sequence) -> None:
        self.waiting[seq.kind].popleft()
        seq.status = Status.RUNNING
        if seq.on_backbone:
            self.running.append(seq)

    def _view(self, out: SchedulerOutput) -> QueueView:
        def pending(kind: Kind) -> float:
            ratio = self.embed_ratio()
            return sum(s.num_remaining * (1.0 if s.on_backbone else ratio) for s in self.waiting[kind])

        return QueueView(
            head_arrival={k: q[0].arrival_seq if q else None for k, q in self.waiting.items()},
            pending_tokens={k: pending(k) for k in KINDS},
            running={k: sum(1 for s in self.running if s.kind == k) for k in KINDS},
            placed_tokens=out.num_backbone_tokens,
        )
