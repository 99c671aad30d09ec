"""Composition policies: how each step's token budget is shared between embedding and generation work.

The scheduler first places running decodes and unfinished chunks, then asks the policy, request by request, which
queue the next new request comes from (`choose`) and how many more new-work tokens the step may take (`room`).
The four policies (`fcfs`, `weighted`, `alternating` and `adaptive`, the default) and `adaptive`'s step-time
model and quotas are described in docs/engine.md ("Composition policies"); the code below uses its symbols
(`cap`, `quota`, `min_new`, `c_g`).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from orthrus_rag.engine.sequence import Kind

KINDS: tuple[Kind, Kind] = ("generate", "embed")
POLICIES: dict[str, type[Policy]] = {}  # runtime.policy name -> class, filled by @register_policy
P = TypeVar("P", bound="type[Policy]")


def register_policy(name: str) -> Callable[[P], P]:
    """Class decorator: make a policy selectable as `runtime.policy=<name>`."""

    def register(cls: P) -> P:
        cls.name = name
        POLICIES[name] = cls
        return cls

    return register


class PolicySettings(Protocol):
    """The runtime settings the policies read (EngineConfig, which checks `policy` against POLICIES, has them all)."""

    policy: str
    weights: dict[str, int]
    step_time_target_s: float | None
    embed_min_share: float
    max_num_batched_tokens: int
    block_size: int
    embedder_token_cost: float | None


def make_policy(config: PolicySettings) -> Policy:
    """The policy `config.policy` names (EngineConfig checked the name)."""
    policy = POLICIES[config.policy].from_config(config)
    policy.fixed_ratio = config.embedder_token_cost
    return policy


@dataclass
class QueueView:
    """What a policy may look at: queue heads, backlog, and what the step already holds."""

    head_arrival: dict[Kind, int | None]  # arrival order of each queue's head (None = empty)
    pending_tokens: dict[Kind, float]  # waiting work in generator-token units
    running: dict[Kind, int]  # requests already running (decoding or mid-chunk)
    placed_tokens: int = 0  # tokens already in this step
    decodes: int = 0  # decode rows already in this step
    new_tokens: dict[Kind, float] = field(default_factory=lambda: {"generate": 0.0, "embed": 0.0})

    def has(self, kind: Kind) -> bool:
        return self.head_arrival[kind] is not None


class Policy:
    """Base: admits nothing by itself; subclasses choose. Owns the cost model the scheduler prices work with."""

    name = "base"
    fixed_ratio: float | None = None  # runtime.embedder_token_cost, set by make_policy

    @classmethod
    def from_config(cls, config: PolicySettings) -> Policy:
        return cls()

    @property
    def embed_ratio(self) -> float:
        """Cost of one co-located embedder token in generator tokens: runtime.embedder_token_cost, else 1."""
        return 1.0 if self.fixed_ratio is None else self.fixed_ratio

    def begin_step(self, view: QueueView) -> None:
        """Called once per step before anything is placed."""

    def allows(self, kind: Kind) -> bool:
        """May running work of this kind take part in this step?"""
        return True

    def plan(self, view: QueueView) -> None:
        """Called after decodes and running chunks are placed, before new work is admitted."""

    def choose(self, view: QueueView) -> Kind | None:
        raise NotImplementedError

    def room(self, view: QueueView) -> float:
        """New-work tokens the step may still take (generator units)."""
        return math.inf

    def observe(self, gen_tokens: int, gen_seconds: float, emb_tokens: int, emb_seconds: float) -> None:
        """Measured cost of the last step, split by model."""


@register_policy("fcfs")
class FCFSPolicy(Policy):
    def choose(self, view: QueueView) -> Kind | None:
        heads = [(a, k) for k, a in view.head_arrival.items() if a is not None]
        return min(heads)[1] if heads else None


@register_policy("weighted")
class WeightedPolicy(Policy):
    def __init__(self, weights: dict[str, int]):
        self.weights = {k: max(0, int(weights.get(k, 1))) for k in KINDS}
        self.current = {k: 0 for k in KINDS}

    @classmethod
    def from_config(cls, config: PolicySettings) -> Policy:
        return cls(config.weights)

    def choose(self, view: QueueView) -> Kind | None:
        live = [k for k in KINDS if view.has(k) and self.weights[k] > 0] or [k for k in KINDS if view.has(k)]
        if not live:
            return None
        for k in live:
            self.current[k] += self.weights[k] or 1
        pick = max(live, key=lambda k: self.current[k])
        self.current[pick] -= sum(self.weights[k] or 1 for k in live)
        return pick


@register_policy("alternating")
class AlternatingPolicy(Policy):
    kind: Kind = "embed"  # the kind this step runs, set per step by begin_step

    def begin_step(self, view: QueueView) -> None:
        other: Kind = "generate" if self.kind == "embed" else "embed"
        if view.has(other) or view.running[other] > 0:
            self.kind = other

    def allows(self, kind: Kind) -> bool:
        return kind == self.kind

    def choose(self, view: QueueView) -> Kind | None:
        return self.kind if view.has(self.kind) else None


@register_policy("adaptive")
class AdaptivePolicy(Policy):
    def __init__(self, step_time_target_s: float | None, min_new_tokens: int, embed_min_share: float,
                 step_tokens: int):
        self.target = step_time_target_s
        self.step_tokens = step_tokens  # B: max_num_batched_tokens
        self.min_share = embed_min_share
        self.min_new = min_new_tokens
        self.gen_cost = LinearCost()  # generator step seconds against tokens
        self.emb_cost = LinearCost()  # embedder seconds against tokens
        self.cap = float(step_tokens)
        self.quota = {"generate": math.inf, "embed": math.inf}

    @classmethod
    def from_config(cls, config: PolicySettings) -> Policy:
        return cls(config.step_time_target_s, 4 * config.block_size, config.embed_min_share,
                   config.max_num_batched_tokens)

    @property
    def embed_ratio(self) -> float:
        """runtime.embedder_token_cost, else measured: c_e / c_g (1 until both costs are known)."""
        if self.fixed_ratio is None and self.gen_cost.ready and self.emb_cost.ready:
            return self.emb_cost.slope / self.gen_cost.slope
        return super().embed_ratio

    def plan(self, view: QueueView) -> None:
        self.cap = float(self.step_tokens)
        if self.target is not None and view.decodes and self.gen_cost.ready:
            c_g = self.gen_cost.slope
            self.cap = max(self.min_new, (self.target - self.gen_cost.intercept - c_g * view.placed_tokens) / c_g)
        pe, pg = view.pending_tokens["embed"], view.pending_tokens["generate"]
        share = max(pe / (pe + pg), self.min_share) if pe else 0.0
        self.quota = {"embed": self.cap * share, "generate": self.cap * (1 - share)}

    def choose(self, view: QueueView) -> Kind | None:
        if self.room(view) <= 0:
            return None
        waiting = [k for k in ("embed", "generate") if view.has(k)]
        under_quota = [k for k in waiting if view.new_tokens[k] < self.quota[k]]
        return (under_quota + waiting)[0] if waiting else None

    def room(self, view: QueueView) -> float:
        return self.cap - sum(view.new_tokens.values())

    def observe(self, gen_tokens: int, gen_seconds: float, emb_tokens: int, emb_seconds: float) -> None:
        if gen_tokens:
            self.gen_cost.add(gen_tokens, gen_seconds)
        if emb_tokens:
            self.emb_cost.add(emb_tokens, emb_seconds)


class LinearCost:
    """Seconds = intercept + slope * tokens, fitted by least squares with exponentially decaying weights."""

    def __init__(self, decay: float = 0.95):
        self.decay = decay
        self.w = self.x = self.y = self.xx = self.xy = 0.0

    def add(self, tokens: float, seconds: float) -> None:
        d = self.decay
        self.w, self.x, self.y = d * self.w + 1, d * self.x + tokens, d * self.y + seconds
        self.xx, self.xy = d * self.xx + tokens * tokens, d * self.xy + tokens * seconds

    @property
    def ready(self) -> bool:
        return self.slope > 0  # 0 before the first observation

    @property
    def slope(self) -> float:
        if self.w == 0:
            return 0.0
        mx, my = self.x / self.w, self.y / self.w
        var = self.xx / self.w - mx * mx
        if var <= 1e-9 * max(1.0, mx * mx):  # one token count seen so far: no line yet, use the ratio
            return my / mx if mx else 0.0
        return max((self.xy / self.w - mx * my) / var, 1e-3 * my / mx)

    @property
    def intercept(self) -> float:
        return max(0.0, (self.y - self.slope * self.x) / self.w) if self.w else 0.0

