"""The paged KV cache tensors in the flat layout (a backend with a layout of its own brings its cache class:
attention/vllm_cpu.py), and the pool's size.

Slots past the pool's blocks are scratch: chunks that keep no KV (one-chunk backbone embeddings) write there for
the duration of their step, so every row of a step is attended the same way.
"""
from __future__ import annotations

import torch

CPU_KV_BLOCKS = 2048  # the pool's size on CPU when runtime.num_kv_blocks is unset


def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Memory of one KV block: K and V rows of `block_size` tokens in every layer."""
    return 2 * num_layers * block_size * num_kv_heads * head_dim * torch.finfo(dtype).bits // 8


def pool_size(device: torch.device, block_bytes: int, fraction: float, reserved_blocks: int, most: int) -> int:
    """KV blocks for an unset `num_kv_blocks`: CPU_KV_BLOCKS on CPU; on CUDA as many as `fraction` of the free
    device memory holds (memory torch has cached but not allocated counts as free), less the `reserved_blocks` of
    scratch the runner adds, and at most `most` (every sequence of a full step at the longest length)."""
    if device.type != "cuda":
        return CPU_KV_BLOCKS
    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    blocks = int(free * fraction) // block_bytes - reserved_blocks
    if blocks < 1:
        raise RuntimeError(f"no device memory left for the KV cache ({free / 2**30:.1f} GiB free): set "
                           "runtime.num_kv_blocks, raise runtime.kv_memory_fraction or use a smaller model")
    return min(blocks, most)


class PagedKVCache:
    """K and V of every layer: per layer (slots, kv_heads * head_dim) each, so a run of consecutive slots is a view
    (the SDPA and flash-attn backends)."""

    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device):
        self.dtype, self.num_kv_heads, self.head_dim = dtype, num_kv_heads, head_dim
        shape = (num_slots, num_kv_heads * head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store rows k, v (n, kv_heads, head_dim) at the given slots (cast to the cache's dtype)."""
        self.k[layer].index_copy_(0, slots, k.reshape(k.shape[0], self.k[layer].shape[1]).to(self.dtype))
        self.v[layer].index_copy_(0, slots, v.reshape(v.shape[0], self.v[layer].shape[1]).to(self.dtype))

    def read(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of the K and V rows (n, kv_heads, head_dim) at the given slots."""
        shape = (len(slots), self.num_kv_heads, self.head_dim)
        return self.k[layer][slots].view(shape), self.v[layer][slots].view(shape)
