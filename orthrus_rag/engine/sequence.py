"""A request's state inside the engine: its tokens, progress, blocks and pooling state. Each field has one writer:
the scheduler the life cycle (status, num_computed, num_cached, num_reused, num_recomputed, reused_from,
finish_reason, pool_state, timings.first_scheduled), the block manager the block table and hashes, the engine
`passages` and `waits_for` when it queues the request, engine/output.py the outputs (output_ids, text and its
detokenisation marks, first-token and finish times)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

from orthrus_rag.engine.pooler import PoolState
from orthrus_rag.engine.request import FinishReason, PoolingParams, RequestTimings, SamplingParams

Kind = Literal["generate", "embed"]
Span = tuple[int, int, bytes]  # [start, end) of a passage in the prompt's tokens, and its passage-store key
Status = enum.Enum("Status", ["WAITING", "RUNNING", "FINISHED"])  # a request's life cycle: engine/scheduler.py


@dataclass
class Sequence:
    request_id: str
    kind: Kind
    prompt_ids: list[int]
    timings: RequestTimings
    arrival_seq: int  # admission order, for FCFS and newest-first preemption
    sampling: SamplingParams | None = None
    pooling: PoolingParams | None = None
    output_ids: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens already run through the model (KV written or pooled)
    num_cached: int = 0  # prompt tokens the prefix cache served at its last admission
    passages: list[Span] = field(default_factory=list)  # passage spans of the prompt (engine/passage_store.py)
    reused_from: int | None = None  # start of the first passage installed from the store: no exact KV from here
    num_reused: int = 0  # prompt tokens installed from the passage store at its last admission, not recomputed
    num_recomputed: int = 0  # prompt tokens installed and then computed again (blend) at its last admission
    waits_for: set[str] = field(default_factory=set)  # requests storing its passages: it starts after them
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)  # prefix-cache digest chain of its full blocks
    status: Status = Status.WAITING
    finish_reason: FinishReason | None = None
    pool_state: PoolState | None = None
    text: str = ""  # detokenised output so far
    num_text_sent: int = 0  # characters of `text` already streamed
    detok_prefix: int = 0  # incremental detokenisation: output tokens [detok_prefix, detok_read) give context,
    detok_read: int = 0  # and tokens from detok_read on are not yet in `text`

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def tokens(self, start: int, end: int) -> list[int]:
        """Tokens [start, end) of prompt and output, without joining the two lists (a step reads a few of many)."""
        prompt = len(self.prompt_ids)
        if start >= prompt:
            return self.output_ids[start - prompt:end - prompt]
        return self.prompt_ids[start:end] + (self.output_ids[:end - prompt] if end > prompt else [])

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_remaining(self) -> int:
        """Tokens still to run before this sequence samples (generate) or pools (embed)."""
        return self.num_tokens - self.num_computed

    @property
    def on_backbone(self) -> bool:
        """Runs through the generator's layers (all generation, and backbone embeddings)."""
        return self.kind == "generate" or (self.pooling is not None and self.pooling.model == "backbone")

    @property
    def is_decode(self) -> bool:
        return self.kind == "generate" and self.status == Status.RUNNING and self.num_remaining == 1 \
            and len(self.output_ids) > 0
