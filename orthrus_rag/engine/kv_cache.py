"""The paged KV cache tensors: per layer one K and one V tensor of shape (num_blocks * block_size, kv_heads, head_dim)."""
from __future__ import annotations

import torch


class PagedKVCache:
    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device):
        shape = (num_slots, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store rows k, v (n, kv_heads, head_dim) at the given flat slots."""
        self.k[layer].index_copy_(0, slots, k)
        self.v[layer].index_copy_(0, slots, v)

    def gather(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V for the given slots as (kv_heads, n, head_dim) views; index_select is the fast gather on CPU."""
        k = self.k[layer].index_select(0, slots).transpose(0, 1)
        v = self.v[layer].index_select(0, slots).transpose(0, 1)
        return k, v
