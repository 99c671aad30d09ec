"""Next-token sampling: greedy, temperature, top-k, top-p, with a per-request seeded generator."""
from __future__ import annotations

import torch

from orthrus_rag.engine.request import SamplingParams


def make_generator(params: SamplingParams) -> torch.Generator | None:
    if params.seed is None:
        return None
    generator = torch.Generator()
    generator.manual_seed(params.seed)
    return generator


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """One token id from one row of logits (vocab,)."""
    if params.greedy:
        return int(torch.argmax(logits))
    logits = logits.float() / params.temperature
    if params.top_k:
        logits = _top_k(logits, params.top_k)
    if params.top_p < 1:
        logits = _top_p(logits, params.top_p)
    probs = torch.softmax(logits, dim=-1).cpu()
    return int(torch.multinomial(probs, 1, generator=generator))


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    k = min(k, logits.shape[-1])
    threshold = torch.topk(logits, k).values[-1]
    return logits.masked_fill(logits < threshold, float("-inf"))


def _top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    sorted_logits, order = torch.sort(logits, descending=True)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= p  # keep the smallest set reaching p
    drop[0] = False  # and always the best token (a p that rounds to 0 would otherwise drop them all)
    sorted_logits[drop] = float("-inf")
    return torch.empty_like(logits).scatter_(0, order, sorted_logits)
