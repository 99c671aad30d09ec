"""Engine configuration: the one place its settings, defaults and meanings are written. The Hydra `runtime` group
maps onto these fields one to one (conf/runtime/default.yaml starts from them: orthrus_rag/launch.py)."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orthrus_rag.engine.attention import BACKENDS
from orthrus_rag.engine.errors import InvalidRequestError
from orthrus_rag.engine.policy import POLICIES


@dataclass
class EngineConfig:
    # Models: a shipped name (see `python -m orthrus_rag.models`) or a local folder.
    generator: str = "smollm2-135m-instruct"
    embedder: str | None = "all-minilm-l6-v2"  # None: embed with the generator's own layers only
    embedding_adapter: str | None = None  # PEFT LoRA folder or shipped adapter for backbone rows; None: embedder.adapter
    dtype: str = "auto"  # auto = bfloat16 on GPUs and CPUs with AVX512-BF16 or AMX, else float32
    device: str = "auto"  # auto = cuda when available, else cpu; or cpu, cuda, cuda:N
    load_format: str = "auto"  # auto = the weights in the model folders; dummy = random weights of the same shapes
    num_threads: int | None = None  # torch threads (>= 1); None: every core the process may use
    attention_backend: str = "auto"  # auto: the fastest of BACKENDS here, timed once (docs/engine.md)
    # Step budget.
    max_num_batched_tokens: int = 512  # tokens (all kinds) in one forward step
    max_num_seqs: int = 64  # rows (sequences) in one step
    max_model_len: int | None = None  # None: the generator's max_position_embeddings
    # Paged KV cache.
    block_size: int = 16  # tokens per KV block
    num_kv_blocks: int | None = None  # None: 2048 on CPU; on CUDA what kv_memory_fraction of free memory holds
    kv_memory_fraction: float = 0.8  # for num_kv_blocks=None on CUDA: share of free memory after the generator loads
    enable_prefix_caching: bool = True  # share full KV blocks with identical token prefixes
    passage_reuse: str = "exact"  # exact | blend | full_reuse: keep passages' KV and reuse it (engine/passage_store.py)
    passage_store_tokens: int = 32768  # blend, full_reuse: passage tokens the store keeps (least recently used go)
    passage_recompute: float = 0.15  # blend: share of each copied passage recomputed, its first tokens; 1: exact
    # Admission and liveness.
    max_waiting: int = 4096  # waiting requests; past this new requests get QueueFullError
    shutdown_timeout_s: float = 30.0  # AsyncEngine.shutdown waits this long for requests in flight, then fails them
    stall_timeout_s: float = 300.0  # health() and /health report a busy engine whose last step ended longer ago
    step_log_size: int = 512  # the last steps kept for GET /v1/engine/steps (engine/step_log.py); 0: none
    # Composition policy: how each step's budget is shared between embed and generate work.
    policy: str = "adaptive"  # adaptive | fcfs | weighted | alternating (engine/policy.py, POLICIES)
    weights: dict[str, int] = field(default_factory=lambda: {"embed": 1, "generate": 1})  # for `weighted`: these keys
    step_time_target_s: float | None = None  # for `adaptive`: a step that decodes should not take longer (None: off)
    embed_min_share: float = 0.5  # for `adaptive`: least share of new-work room for waiting embeddings
    embedder_token_cost: float | None = None  # embedder token's cost in generator tokens; None: adaptive measures it

    def __post_init__(self) -> None:
        """Every value checked once, here: a bad one is an InvalidRequestError naming its `runtime.` key, raised
        before anything loads (dataclasses.replace checks the copy it makes)."""
        for names, valid, must in CHECKS:
            for name in names:
                if not valid(getattr(self, name)):
                    raise InvalidRequestError(f"runtime.{name} " + must.format(getattr(self, name)), name)
        unknown = sorted(set(self.weights) - {"embed", "generate"})
        if unknown:
            raise InvalidRequestError(f"runtime.weights takes the keys embed and generate only; got {unknown}",
                                      "weights")


# (fields, whether a value is valid, what it must be: the error message after "runtime.<field> ", the value in {!r})
CHECKS: list[tuple[tuple[str, ...], Callable[[Any], bool], str]] = [
    (("attention_backend",), lambda v: v in ("auto", *BACKENDS),
     f"must be auto or one of {list(BACKENDS)}, got {{!r}}"),
    (("policy",), lambda v: v in POLICIES, f"must be one of {sorted(POLICIES)}, got {{!r}}"),
    (("load_format",), lambda v: v in ("auto", "dummy"), "must be auto or dummy, got {!r}"),
    (("passage_reuse",), lambda v: v in ("exact", "blend", "full_reuse"),
     "must be exact, blend or full_reuse, got {!r}"),
    (("passage_recompute",), lambda v: 0 < float(v) <= 1, "must be in (0, 1], got {!r}"),
    (("device",), lambda v: re.fullmatch(r"auto|cpu|cuda(:\d+)?", str(v)) is not None,
     "must be auto, cpu, cuda or cuda:N (N a GPU's index), got {!r}"),
    (("max_num_batched_tokens", "max_num_seqs", "block_size", "max_waiting", "passage_store_tokens"),
     lambda v: int(v) >= 1,
     "must be >= 1, got {!r}"),
    (("num_kv_blocks", "max_model_len", "num_threads"), lambda v: v is None or int(v) >= 1,
     "must be >= 1, or null for its default; got {!r}"),
    (("step_log_size",), lambda v: int(v) >= 0, "must be >= 0, got {!r}"),
    (("shutdown_timeout_s", "stall_timeout_s"), lambda v: float(v) > 0, "must be > 0 seconds, got {!r}"),
    (("kv_memory_fraction",), lambda v: 0 < v <= 1, "must be in (0, 1]"),
    (("embed_min_share",), lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    (("step_time_target_s",), lambda v: v is None or v > 0, "must be > 0, or null for no target"),
    (("embedder_token_cost",), lambda v: v is None or 0 < float(v) < math.inf,
     "must be > 0 (an embedder token's cost in generator tokens), or null; got {!r}"),
]
