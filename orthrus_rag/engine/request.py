"""Request parameters and outputs: the typed contract between the engine and its callers."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from orthrus_rag.engine.errors import InvalidRequestError

FinishReason = Literal["stop", "length", "abort"]
GREEDY_BELOW = 1e-5  # a temperature below this samples greedily (dividing by it would overflow the logits)
SEED_RANGE = 2 ** 64  # seeds are integers in [0, 2**64)
PoolingType = Literal["mean", "last", "cls"]
POOLING_TYPES = ("mean", "last", "cls")


@dataclass
class SamplingParams:
    """How to generate. temperature 0 is greedy; top_k 0 and top_p 1 switch those filters off."""

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    # [start, end) token spans of the prompt that are passages, in order; with runtime.passage_reuse=blend or full_reuse
    # their KV is computed once and reused (engine/passage_store.py); otherwise they change nothing
    passage_spans: list[list[int]] = field(default_factory=list)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def validate(self) -> None:
        """Reject every value that could fail later, so a queued request can always be sampled."""
        if not _integer(self.max_tokens) or self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}", "max_tokens")
        if not _finite(self.temperature) or self.temperature < 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature!r}", "temperature")
        if not _finite(self.top_p) or not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}", "top_p")
        if not _integer(self.top_k) or self.top_k < 0:
            raise InvalidRequestError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}", "top_k")
        if self.seed is not None and (not _integer(self.seed) or not 0 <= self.seed < SEED_RANGE):
            raise InvalidRequestError(f"seed must be an integer in [0, 2**64), got {self.seed!r}", "seed")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not isinstance(self.stop, (list, tuple)) or any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidRequestError("stop must be a list of non-empty strings", "stop")
        if not isinstance(self.stop_token_ids, (list, tuple)) or \
                any(not _integer(t) or t < 0 for t in self.stop_token_ids):
            raise InvalidRequestError("stop_token_ids must be a list of integers >= 0", "stop_token_ids")
        if not isinstance(self.ignore_eos, bool):
            raise InvalidRequestError(f"ignore_eos must be true or false, got {self.ignore_eos!r}", "ignore_eos")
        if not _spans(self.passage_spans):
            raise InvalidRequestError("passage_spans must be a list of [start, end] token positions with "
                                      "0 <= start < end, each span after the one before", "passage_spans")


@dataclass
class PoolingParams:
    """How to embed. `model` None uses the configured embedder; "backbone" the generator's own layers.
    `truncate` embeds only the input's first that many tokens (None: all of them)."""

    pooling: PoolingType = "mean"
    normalize: bool = True
    model: str | None = None
    truncate: int | None = None

    def validate(self) -> None:
        if self.pooling not in POOLING_TYPES:
            raise InvalidRequestError(f"pooling must be one of {POOLING_TYPES}, got {self.pooling!r}", "pooling")
        if self.model not in (None, "backbone"):
            raise InvalidRequestError(f"model must be None (the embedder) or 'backbone', got {self.model!r}", "model")
        if not isinstance(self.normalize, bool):
            raise InvalidRequestError(f"normalize must be true or false, got {self.normalize!r}", "normalize")
        if self.truncate is not None and (not _integer(self.truncate) or self.truncate < 1):
            raise InvalidRequestError(f"truncate must be null or an integer >= 1, got {self.truncate!r}", "truncate")


@dataclass
class RequestTimings:
    """Wall-clock instants (time.perf_counter seconds) in a request's life."""

    arrival: float
    first_scheduled: float | None = None
    first_token: float | None = None
    finished: float | None = None

    @property
    def queue_s(self) -> float | None:
        return None if self.first_scheduled is None else self.first_scheduled - self.arrival

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def latency_s(self) -> float | None:
        return None if self.finished is None else self.finished - self.arrival


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (not computed) when it was last admitted
    reused_tokens: int = 0  # prompt tokens copied from the passage store (not computed), runtime.passage_reuse
    recomputed_tokens: int = 0  # prompt tokens copied from the passage store and computed again (blend)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class GenerateOutput:
    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    usage: Usage
    timings: RequestTimings


@dataclass
class EmbedOutput:
    request_id: str
    embedding: np.ndarray  # float32, shape (dim,)
    num_tokens: int
    timings: RequestTimings


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _spans(spans: object) -> bool:
    if not isinstance(spans, (list, tuple)):
        return False
    end = 0
    for span in spans:
        if not isinstance(span, (list, tuple)) or len(span) != 2 or not all(_integer(x) for x in span) \
                or not end <= span[0] < span[1]:
            return False
        end = span[1]
    return True


def _integer(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
