"""Moving cached keys to another position.

RoPE turns each pair of a key's dimensions by `position * inv_freq[i]`, so a key written at position p becomes the
key at p + delta by one more turn of `delta * inv_freq[i]`; values carry no position. A span whose KV was computed
once can then be placed `delta` positions further on (the passage KV store of docs/engine.md builds on this), and it
equals a prefill of the same tokens, with everything before them shifted alike, up to rounding.
"""
from __future__ import annotations

import torch
from transformers.models.llama.modeling_llama import rotate_half

MOVABLE_ROPE = ("default", "linear", "llama3")  # a fixed frequency per pair; dynamic and scaled variants are not


class KeyRotation:
    """Turns keys (n, kv_heads, head_dim) of the model's attention layers by `delta` positions."""

    def __init__(self, model: torch.nn.Module):
        why = unmovable(model)
        if why is not None:
            raise ValueError(f"cached keys of this model cannot be moved to another position: {why}")
        self.inv_freq = rotary_of(model).inv_freq.detach().double()

    def __call__(self, k: torch.Tensor, delta: int) -> torch.Tensor:
        if delta == 0:
            return k
        angle = torch.cat([delta * self.inv_freq] * 2).to(k.device)
        cos, sin = angle.cos().float(), angle.sin().float()
        turned = k.float() * cos + rotate_half(k.float()) * sin
        return turned.to(k.dtype)


def rotary_of(model: torch.nn.Module) -> torch.nn.Module | None:
    """The model's rotary embedding module (transformers keeps one on the decoder), or None."""
    return getattr(getattr(model, "model", model), "rotary_emb", None)


def unmovable(model: torch.nn.Module) -> str | None:
    """Why the model's cached keys cannot be turned to another position, or None."""
    rotary = rotary_of(model)
    if rotary is None or not hasattr(rotary, "inv_freq"):
        return "it has no rotary position embedding that transformers keeps as `model.rotary_emb`"
    kind = getattr(rotary, "rope_type", "default")
    if kind not in MOVABLE_ROPE or getattr(rotary, "attention_scaling", 1.0) != 1.0:
        return f"its RoPE kind {kind!r} changes with the sequence or scales it; movable kinds: {list(MOVABLE_ROPE)}"
    config = model.config.get_text_config()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if 2 * rotary.inv_freq.numel() != head_dim:
        return "its RoPE turns only part of each head"
    return None
