"""The step's attention as a transformers attention implementation.

transformers runs its own model code (projections, RoPE, MLP, norms) over one flat row of packed tokens; for each
attention layer it calls `paged_attention` with the step's `StepAttention` (the keyword argument `orthrus_meta`),
which writes every row's K/V into the cache (chunks that keep no KV use scratch slots) and lets the step's backend
attend each sequence to its own keys, where the cache holds them.
"""
from __future__ import annotations

from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from orthrus_rag.engine.attention.base import StepAttention

ATTN_IMPLEMENTATION = "orthrus_paged"


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                    orthrus_meta: StepAttention | None = None, **kwargs):
    """query (1, heads, T, d); key/value (1, kv_heads, T, d). Returns (1, T, heads, d) and no weights."""
    if orthrus_meta is None:
        raise RuntimeError("paged_attention needs orthrus_meta; run the model through ModelRunner")
    step, layer = orthrus_meta, module.layer_idx
    step.cache.write(layer, step.write_slots, key[0].transpose(0, 1), value[0].transpose(0, 1))
    out = step.backend.attend(step, layer, query[0].transpose(0, 1), scaling, getattr(module, "is_causal", True),
                              sliding_window)
    return out[None], None


def register() -> str:
    """Register the implementation with transformers (idempotent) and return its name."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, lambda *args, **kwargs: None)  # it masks by itself
    return ATTN_IMPLEMENTATION
