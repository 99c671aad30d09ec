"""Attention over a packed batch with a paged KV cache, registered as a transformers attention implementation.

transformers runs its own model code (projections, RoPE, MLP, norms) over one flat row of packed tokens; for each
attention layer it calls `paged_attention` with the step's `AttentionMetadata` (the keyword argument
`orthrus_meta`). The function writes every row's K/V into the cache (chunks that keep no KV use scratch slots), then
attends with ONE call for all rows of the step, whatever the number of sequences:

- `sdpa_tiled` (CPU, and CUDA without flash-attn): every sequence's chunk is cut into query tiles of `tile` rows;
  each tile is one batch element whose keys are gathered from the cache with one `index_select` and padded to the
  longest sequence of the step; one masked `scaled_dot_product_attention` call covers all tiles. A decode is a tile
  of one query. On CPU the cache and the attention math are float32 (torch's bfloat16 CPU kernel is several times
  slower for small queries); weights and activations elsewhere keep the model's dtype.
- `flash_attn_varlen` (CUDA with `flash_attn` importable): the packed queries and the gathered keys go to
  `flash_attn_varlen_func` with cumulative sequence lengths.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from orthrus_rag.engine.kv_cache import PagedKVCache

ATTN_IMPLEMENTATION = "orthrus_paged"
SDPA_TILED, FLASH_VARLEN = "sdpa_tiled", "flash_attn_varlen"


def choose_backend(device: torch.device) -> str:
    """flash-attn's varlen kernel on CUDA when it is installed, else one tiled SDPA call."""
    if device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return FLASH_VARLEN
    return SDPA_TILED


@dataclass
class TileLayout:
    """Query tiles of one step: tile b holds packed rows [row0_b, row0_b + n_b) of one sequence."""

    tile: int  # queries per tile (padded)
    width: int  # keys per tile (padded): the longest sequence of the step, this chunk included
    query_rows: torch.Tensor  # (B * tile,) packed row of each tile query; padding repeats a valid row
    query_pos: torch.Tensor  # (B, tile) position of each tile query in its sequence; padding 0
    key_slots: torch.Tensor  # (B * width,) cache slot of each tile key; padding slot 0
    key_len: torch.Tensor  # (B,) keys of the tile's sequence up to the end of its chunk
    out_index: torch.Tensor  # (T,) where each packed row sits in the flattened (B * tile) output


@dataclass
class VarlenLayout:
    """Per-sequence packed layout for varlen kernels."""

    key_slots: torch.Tensor  # (sum of key lengths,) slots of every sequence's keys, sequence after sequence
    cu_seqlens_q: torch.Tensor  # (S + 1,) int32
    cu_seqlens_k: torch.Tensor  # (S + 1,) int32
    max_seqlen_q: int
    max_seqlen_k: int


@dataclass
class AttentionMetadata:
    cache: PagedKVCache
    write_slots: torch.Tensor  # (T,) cache slot of every packed row's K/V
    backend: str = SDPA_TILED
    tiles: TileLayout | None = None
    varlen: VarlenLayout | None = None
    _masks: dict = field(default_factory=dict)

    def mask(self, causal: bool, window: int | None) -> torch.Tensor:
        """(B, 1, tile, width) boolean, True = attend; built once per step and reused by every layer."""
        key = (causal, window)
        if key not in self._masks:
            t = self.tiles
            k_pos = torch.arange(t.width, device=t.key_len.device)[None, None, :]
            q_pos = t.query_pos[:, :, None]
            allowed = k_pos < t.key_len[:, None, None]
            if causal:
                allowed = allowed & (k_pos <= q_pos)
            if window is not None:
                allowed = allowed & ((q_pos - k_pos).abs() < window)  # two-sided when bidirectional
            self._masks[key] = allowed[:, None]
        return self._masks[key]


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                    orthrus_meta: AttentionMetadata | None = None, **kwargs):
    """query (1, heads, T, d); key/value (1, kv_heads, T, d). Returns (1, T, heads, d) and no weights."""
    if orthrus_meta is None:
        raise RuntimeError("paged_attention needs orthrus_meta; run the model through ModelRunner")
    meta, layer = orthrus_meta, module.layer_idx
    meta.cache.write(layer, meta.write_slots, key[0].transpose(0, 1), value[0].transpose(0, 1))
    causal = getattr(module, "is_causal", True)
    q = query[0].transpose(0, 1)  # (T, heads, d)
    if meta.backend == FLASH_VARLEN:
        out = _attend_varlen(meta, layer, q, scaling, causal, sliding_window)
    else:
        out = _attend_tiles(meta, layer, q, scaling, causal, sliding_window)
    return out[None], None


def _attend_tiles(meta: AttentionMetadata, layer: int, q: torch.Tensor, scaling, causal: bool,
                  window: int | None) -> torch.Tensor:
    t, cache = meta.tiles, meta.cache
    heads, dim = q.shape[1], q.shape[2]
    n_tiles = t.key_len.numel()
    k, v = cache.gather(layer, t.key_slots)  # (B * width, kv_heads, d) each
    k = k.view(n_tiles, t.width, -1, dim).transpose(1, 2)
    v = v.view(n_tiles, t.width, -1, dim).transpose(1, 2)
    qt = q.index_select(0, t.query_rows).to(cache.dtype).view(n_tiles, t.tile, heads, dim).transpose(1, 2)
    o = F.scaled_dot_product_attention(qt, k, v, attn_mask=meta.mask(causal, window), scale=scaling,
                                       enable_gqa=k.shape[1] != heads)
    return o.transpose(1, 2).reshape(n_tiles * t.tile, heads, dim).index_select(0, t.out_index).to(q.dtype)


def _attend_varlen(meta: AttentionMetadata, layer: int, q: torch.Tensor, scaling, causal: bool,
                   window: int | None) -> torch.Tensor:
    from flash_attn import flash_attn_varlen_func

    lay = meta.varlen
    k, v = meta.cache.gather(layer, lay.key_slots)
    left = window - 1 if window is not None else -1
    return flash_attn_varlen_func(q, k, v, lay.cu_seqlens_q, lay.cu_seqlens_k, lay.max_seqlen_q, lay.max_seqlen_k,
                                  softmax_scale=scaling, causal=causal, window_size=(left, left if not causal else 0))


def _no_mask(*args, **kwargs):
    return None


def register() -> str:
    """Register the implementation with transformers (idempotent) and return its name."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _no_mask)
    return ATTN_IMPLEMENTATION
