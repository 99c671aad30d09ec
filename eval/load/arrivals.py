"""Load generation: when questions arrive (open loop with gamma gaps, or closed loop: eval/bench/README.md,
workload=rag). Burstiness > 1 sends bursts separated by longer lulls (coefficient of variation sqrt(burstiness)),
burstiness -> 0 approaches a constant gap; the first question arrives after the first gap.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Load:
    """How questions are offered: open loop at `rate` (questions/s) or, with `rate` None, closed loop."""

    rate: float | None = None
    burstiness: float = 1.0
    clients: int = 8  # closed loop: questions in flight
    max_in_flight: int | None = None  # open loop: cap on questions in flight (None: no cap)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"rate must be > 0 questions/s (or None for a closed loop), got {self.rate!r}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0 (1 = Poisson), got {self.burstiness!r}")
        if self.rate is None and (not isinstance(self.clients, int) or self.clients < 1):
            raise ValueError(f"a closed loop needs clients >= 1, got {self.clients!r}")
        if self.rate is not None and self.max_in_flight is not None and (
                not isinstance(self.max_in_flight, int) or self.max_in_flight < 1):
            raise ValueError(f"max_in_flight must be >= 1 (or None for no cap), got {self.max_in_flight!r}")

    @property
    def label(self) -> str:
        if self.rate is None:
            return f"closed C={self.clients}"
        return f"rate {self.rate:g}/s" + ("" if self.burstiness == 1 else f" b={self.burstiness:g}")

    def arrivals(self, n: int) -> list[float] | None:
        """Arrival offsets (seconds from the start) for n questions; None for a closed loop."""
        return None if self.rate is None else arrival_offsets(n, self.rate, self.burstiness, self.seed)

    def concurrency(self) -> int | None:
        """What Pipeline.run's `concurrency` should be for this load."""
        return self.clients if self.rate is None else self.max_in_flight


def arrival_gaps(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """n gamma-distributed gaps with mean 1/rate and shape 1/burstiness (burstiness 1: exponential)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not rate > 0 or not burstiness > 0:
        raise ValueError(f"rate and burstiness must be > 0, got rate={rate!r}, burstiness={burstiness!r}")
    shape = 1.0 / burstiness
    return np.random.default_rng(seed).gamma(shape, scale=1.0 / (rate * shape), size=n)


def arrival_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Cumulative arrival times (seconds from the start of the run) of n questions."""
    return np.cumsum(arrival_gaps(n, rate, burstiness, seed)).tolist()
