"""flash-attn's paged varlen kernel on CUDA: the packed queries and the cache's pages with each sequence's block
table, one call per layer."""
from __future__ import annotations

import importlib.util

import torch

from orthrus_rag.engine.attention.base import Geometry
from orthrus_rag.engine.attention.block_tables import BlockTableBackend, KernelStep

FLASH_PAGE = 256  # flash-attn 2 reads a paged cache only in pages of a multiple of 256 tokens


class FlashPaged(BlockTableBackend):
    name = "flash_attn_paged"

    @staticmethod
    def unsupported(geometry: Geometry) -> str | None:
        if geometry.device.type != "cuda":
            return "it runs on CUDA only"
        if geometry.block_size % FLASH_PAGE:
            return f"block_size must be a multiple of {FLASH_PAGE}"
        return None if importlib.util.find_spec("flash_attn") is not None else "flash_attn is not installed"

    def attend(self, step: KernelStep, layer, q, scale, causal, window) -> torch.Tensor:
        from flash_attn import flash_attn_varlen_func

        cache, lay = step.cache, step.kernel
        pages = (-1, lay.page, cache.num_kv_heads, cache.head_dim)
        left = -1 if window is None else window - 1
        return flash_attn_varlen_func(q.to(cache.dtype), cache.k[layer].view(pages), cache.v[layer].view(pages),
                                      lay.query_start, lay.key_start, lay.max_queries, lay.max_keys,
                                      softmax_scale=scale, causal=causal,
                                      window_size=(left, left if not causal else 0),
                                      block_table=lay.block_table).to(q.dtype)
