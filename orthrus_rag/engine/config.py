"""Engine configuration: the one place its settings, defaults and meanings are written. The Hydra `runtime` group
maps onto these fields one to one (conf/runtime/default.yaml starts from them: orthrus_rag/launch.py)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from orthrus_rag.engine.errors import InvalidRequestError

ATTENTION_BACKENDS = ("sdpa_in_place", "flash_attn_paged", "vllm_cpu")  # see engine/attention.py


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
    # auto: vllm_cpu on CPU where its kernels load, flash_attn_paged on CUDA with flash-attn and block_size % 256 == 0,
    # else sdpa_in_place (all read the KV cache in place; engine/attention.py)
    attention_backend: str = "auto"
    # Step budget.
    max_num_batched_tokens: int = 512  # tokens (all kinds) in one forward step
    max_num_seqs: int = 64  # rows (sequences) in one step
    max_model_len: int | None = None  # None: the generator's max_position_embeddings
    # Paged KV cache.
    block_size: int = 16  # tokens per KV block
    num_kv_blocks: int | None = None  # None: 2048 on CPU; on CUDA what kv_memory_fraction of free memory holds
    kv_memory_fraction: float = 0.8  # for num_kv_blocks=None on CUDA: share of free memory after the generator loads
    enable_prefix_caching: bool = True  # share full KV blocks with identical token prefixes
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
    # Co-located embedder's cost per token in generator tokens (> 0). None: `adaptive` measures it from the step
    # times; the other policies count 1.
    embedder_token_cost: float | None = None

    def validate(self) -> None:
        if self.attention_backend not in ("auto", *ATTENTION_BACKENDS):
            raise InvalidRequestError(f"runtime.attention_backend must be auto or one of {list(ATTENTION_BACKENDS)}, "
                                      f"got {self.attention_backend!r}", "attention_backend")
        if self.load_format not in ("auto", "dummy"):
            raise InvalidRequestError(f"runtime.load_format must be auto or dummy, got {self.load_format!r}",
                                      "load_format")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", str(self.device)):
            raise InvalidRequestError(f"runtime.device must be auto, cpu, cuda or cuda:N (N a GPU's index), got "
                                      f"{self.device!r}", "device")
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "max_waiting"):
            if int(getattr(self, name)) < 1:
                raise InvalidRequestError(f"runtime.{name} must be >= 1, got {getattr(self, name)!r}", name)
        for name in ("num_kv_blocks", "max_model_len", "num_threads"):
            if getattr(self, name) is not None and int(getattr(self, name)) < 1:
                raise InvalidRequestError(f"runtime.{name} must be >= 1, or null for its default; got "
                                          f"{getattr(self, name)!r}", name)
        if int(self.step_log_size) < 0:
            raise InvalidRequestError(f"runtime.step_log_size must be >= 0, got {self.step_log_size!r}",
                                      "step_log_size")
        for name in ("shutdown_timeout_s", "stall_timeout_s"):
            if not float(getattr(self, name)) > 0:
                raise InvalidRequestError(f"runtime.{name} must be > 0 seconds, got {getattr(self, name)!r}", name)
        if not 0 < self.kv_memory_fraction <= 1:
            raise InvalidRequestError("runtime.kv_memory_fraction must be in (0, 1]", "kv_memory_fraction")
        if not 0 <= self.embed_min_share <= 1:
            raise InvalidRequestError("runtime.embed_min_share must be in [0, 1]", "embed_min_share")
        if self.step_time_target_s is not None and not self.step_time_target_s > 0:
            raise InvalidRequestError("runtime.step_time_target_s must be > 0, or null for no target",
                                      "step_time_target_s")
        if self.embedder_token_cost is not None and not 0 < float(self.embedder_token_cost) < math.inf:
            raise InvalidRequestError(f"runtime.embedder_token_cost must be > 0 (an embedder token's cost in generator "
                                      f"tokens), or null; got {self.embedder_token_cost!r}", "embedder_token_cost")
        unknown = sorted(set(self.weights) - {"embed", "generate"})
        if unknown:
            raise InvalidRequestError(f"runtime.weights takes the keys embed and generate only; got {unknown}",
                                      "weights")
