"""Attention over a packed batch with a paged KV cache, registered as a transformers attention implementation.

transformers runs its own model code (projections, RoPE, MLP, norms) over one flat row of packed tokens; for each
attention layer it calls `paged_attention` with the step's `AttentionMetadata` (passed as the keyword argument
`orthrus_meta`). The function writes the new K/V into the cache, then attends: all single-token decode rows together
in one padded call (keys gathered from the cache, padding masked), then every other chunk on its own (a chunk with
earlier context reads its keys back from the cache, a chunk without context uses its own).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from orthrus_rag.engine.kv_cache import PagedKVCache

ATTN_IMPLEMENTATION = "orthrus_paged"


@dataclass
class Segment:
    """One sequence's rows [start, end) in the packed batch."""

    start: int
    end: int
    context_len: int  # tokens of this sequence before the chunk, already in the cache
    kv_slots: torch.Tensor | None  # cache slots of positions 0 .. context_len + n - 1; None: chunk keeps no KV
    _masks: dict = field(default_factory=dict)

    @property
    def num_queries(self) -> int:
        return self.end - self.start

    def mask(self, causal: bool, window: int | None, device: torch.device) -> torch.Tensor | None:
        """Boolean mask (queries, keys), True = attend; None when every key may be attended."""
        key = (causal, window)
        if key not in self._masks:
            self._masks[key] = self._build_mask(causal, window, device)
        return self._masks[key]

    def _build_mask(self, causal: bool, window: int | None, device: torch.device) -> torch.Tensor | None:
        n, ctx = self.num_queries, self.context_len
        if window is None and (not causal or n == 1 or ctx == 0):
            return None  # full attention, or plain causal (SDPA's is_causal)
        q_pos = torch.arange(ctx, ctx + n, device=device)[:, None]
        k_pos = torch.arange(ctx + n, device=device)[None, :]
        allowed = k_pos <= q_pos if causal else torch.ones(n, ctx + n, dtype=torch.bool, device=device)
        if window is not None:
            allowed &= (q_pos - k_pos) < window
        return allowed


@dataclass
class DecodeGroup:
    """Single-token rows with cached context, attended in one call over keys padded to the longest context."""

    rows: torch.Tensor  # (D,) rows of the packed batch
    slots: torch.Tensor  # (D * L,) cache slots, padded with slot 0
    lengths: torch.Tensor  # (D,) keys per row, the row's own token included
    _masks: dict = field(default_factory=dict)

    def mask(self, window: int | None) -> torch.Tensor:
        """(D, 1, 1, L) boolean, True = attend."""
        if window not in self._masks:
            width = self.slots.numel() // self.rows.numel()
            k_pos = torch.arange(width, device=self.slots.device)[None, :]
            allowed = k_pos < self.lengths[:, None]
            if window is not None:
                allowed &= (self.lengths[:, None] - 1 - k_pos) < window
            self._masks[window] = allowed[:, None, None, :]
        return self._masks[window]


@dataclass
class AttentionMetadata:
    cache: PagedKVCache | None
    segments: list[Segment]  # every chunk not in the decode group
    write_rows: torch.Tensor  # rows of the packed batch whose K/V are stored
    write_slots: torch.Tensor  # and where
    decodes: DecodeGroup | None = None


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                    orthrus_meta: AttentionMetadata | None = None, **kwargs):
    """query (1, heads, T, d); key/value (1, kv_heads, T, d). Returns (1, T, heads, d) and no weights."""
    if orthrus_meta is None:
        raise RuntimeError("paged_attention needs orthrus_meta; run the model through ModelRunner")
    meta, layer = orthrus_meta, module.layer_idx
    q, k, v = query[0], key[0].transpose(0, 1), value[0].transpose(0, 1)  # k, v: (T, kv_heads, d)
    if meta.cache is not None and meta.write_rows.numel():
        meta.cache.write(layer, meta.write_slots, k.index_select(0, meta.write_rows),
                         v.index_select(0, meta.write_rows))
    causal = getattr(module, "is_causal", True)
    out = query.new_empty(q.shape[1], q.shape[0], q.shape[2])
    if meta.decodes is not None:
        _attend_decodes(meta, layer, q, out, scaling, sliding_window)
    for seg in meta.segments:
        if seg.kv_slots is None:
            ks, vs = k[seg.start:seg.end].transpose(0, 1), v[seg.start:seg.end].transpose(0, 1)
        else:
            ks, vs = meta.cache.gather(layer, seg.kv_slots)
        mask = seg.mask(causal, sliding_window, q.device)
        is_causal = causal and mask is None and seg.num_queries > 1
        o = F.scaled_dot_product_attention(q[:, seg.start:seg.end], ks, vs, attn_mask=mask, is_causal=is_causal,
                                           scale=scaling, enable_gqa=ks.shape[0] != q.shape[0])
        out[seg.start:seg.end] = o.transpose(0, 1)
    return out[None], None


def _attend_decodes(meta: AttentionMetadata, layer: int, q: torch.Tensor, out: torch.Tensor, scaling,
                    window: int | None) -> None:
    group = meta.decodes
    d, kv_heads = group.rows.numel(), meta.cache.k[layer].shape[1]
    k = meta.cache.k[layer].index_select(0, group.slots).view(d, -1, kv_heads, q.shape[2]).transpose(1, 2)
    v = meta.cache.v[layer].index_select(0, group.slots).view(d, -1, kv_heads, q.shape[2]).transpose(1, 2)
    qd = q.index_select(1, group.rows).transpose(0, 1)[:, :, None, :]  # (D, heads, 1, d)
    o = F.scaled_dot_product_attention(qd, k, v, attn_mask=group.mask(window), scale=scaling,
                                       enable_gqa=kv_heads != q.shape[0])
    out.index_copy_(0, group.rows, o[:, :, 0, :])


def _no_mask(*args, **kwargs):
    return None


def register() -> str:
    """Register the implementation with transformers (idempotent) and return its name."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _no_mask)
    return ATTN_IMPLEMENTATION
