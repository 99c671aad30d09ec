"""Pooled embeddings of padded batches, computed as the engine pools backbone rows: the final-norm hidden states
of each text's own tokens (tokenizer.encode, no truncation), averaged (mean) or the last one (last)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

POOLINGS = ("mean", "last")


def encode_batch(tokenizer, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
    """Right-padded ids and mask; each row is `tokenizer.encode(text)` cut at `max_length` tokens."""
    rows = [tokenizer.encode(text)[:max_length] for text in texts]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return {"input_ids": ids, "attention_mask": mask}


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(batch, tokens, hidden) -> (batch, hidden) over the unmasked tokens, in float32."""
    hidden, mask = hidden.float(), mask.to(hidden.device)
    if pooling == "mean":
        return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    if pooling == "last":
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), mask.sum(1) - 1]
    raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")


def backbone(model: nn.Module) -> nn.Module:
    """The decoder stack without the LM head (its output is the final-norm hidden states), under any PEFT wrap."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model


def pooled_embeddings(model: nn.Module, batch: dict[str, torch.Tensor], pooling: str) -> torch.Tensor:
    """Normalised embeddings of one encoded batch (grad flows when enabled by the caller)."""
    device = next(model.parameters()).device
    hidden = backbone(model)(input_ids=batch["input_ids"].to(device),
                             attention_mask=batch["attention_mask"].to(device)).last_hidden_state
    return F.normalize(pool(hidden, batch["attention_mask"], pooling), dim=-1)


@torch.no_grad()
def embed_texts(model: nn.Module, tokenizer, texts: list[str], pooling: str, max_length: int,
                batch_size: int = 32) -> torch.Tensor:
    """Normalised embeddings of many texts, batch by batch, longest first to pad little."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    parts = {}
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        vectors = pooled_embeddings(model, encode_batch(tokenizer, [texts[i] for i in chunk], max_length), pooling)
        parts.update(zip(chunk, vectors.cpu()))
    return torch.stack([parts[i] for i in range(len(texts))]) if parts else torch.empty(0)
