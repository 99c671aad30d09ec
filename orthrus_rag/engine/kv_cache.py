"""The paged KV cache tensors: per layer one K and one V tensor of shape (num_slots, kv_heads * head_dim).

Rows are flat: gathering and writing whole rows of a 2-D tensor is ~4x faster on CPU than rows of a 3-D one.

Slots past the pool's blocks are scratch: chunks that keep no KV (one-chunk backbone embeddings) write there for
the duration of their step, so every row of a step is attended the same way.
"""
from __future__ import annotations

import torch


class PagedKVCache:
    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device):
        shape = (num_slots, num_kv_heads * head_dim)
        self.dtype, self.num_kv_heads, self.head_dim = dtype, num_kv_heads, head_dim
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store rows k, v (n, kv_heads, head_dim) at the given flat slots (cast to the cache's dtype)."""
        self.k[layer].index_copy_(0, slots, k.reshape(k.shape[0], self.k[layer].shape[1]).to(self.dtype))
        self.v[layer].index_copy_(0, slots, v.reshape(v.shape[0], self.v[layer].shape[1]).to(self.dtype))

    def gather(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V at the given slots, (n, kv_heads, head_dim) each; index_select is the fast gather on CPU."""
        shape = (slots.numel(), self.num_kv_heads, self.head_dim)
        return self.k[layer].index_select(0, slots).view(shape), self.v[layer].index_select(0, slots).view(shape)
