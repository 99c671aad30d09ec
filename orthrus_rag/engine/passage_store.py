"""The passage KV store (`runtime.passage_reuse=blend | full_reuse`): the KV of a passage computed once after a
preamble, kept under the digest of both, and copied into any later prompt that shows the same passage after the same
preamble, its keys turned to the new position (engine/rope.py).

A request names its passages as token spans of its prompt (`SamplingParams.passage_spans`); its preamble is
everything before the first span. The first span of any request follows the preamble directly, so its KV, computed
exactly, is what the store keeps (the engine queues a short request, preamble + passage, for each later span not
stored). An installed passage attends to the preamble and itself only, not to the passages before it: answers may
change, which is why exact prefill is the default. `blend` computes the first `runtime.passage_recompute` share of
each installed passage again in the step that installs it (the scheduler's recompute runs): those tokens attend to
everything before them, and what follows attends to their exact K/V. Blocks from the first installed span on never
enter the prefix cache's chain of exact prefixes (docs/engine.md, "Passage KV reuse").
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from orthrus_rag.engine.block_manager import block_digest
from orthrus_rag.engine.rope import KeyRotation
from orthrus_rag.engine.sequence import Span


@dataclass
class StoredPassage:
    k: list[torch.Tensor]  # per layer (tokens, kv_heads, head_dim), as written at `position`
    v: list[torch.Tensor]
    position: int

    @property
    def num_tokens(self) -> int:
        return self.k[0].shape[0]


def spans_of(prompt_ids: list[int], spans: list[list[int]]) -> list[Span]:
    """The request's passage spans with their keys (spans already checked: increasing, inside the prompt). A
    passage's key is the prefix cache's digest chain over the preamble, then the passage's tokens."""
    if not spans:
        return []
    head = block_digest(None, prompt_ids[:spans[0][0]])  # the preamble, hashed once
    return [(s, e, block_digest(head, prompt_ids[s:e])) for s, e in spans]


class PassageStore:
    """Stored passages under their keys, least recently used dropped first past `capacity` tokens."""

    def __init__(self, capacity: int, rotation: KeyRotation):
        self.capacity, self.rotation = capacity, rotation
        self.passages: OrderedDict[bytes, StoredPassage] = OrderedDict()
        self.tokens = 0
        self.counts = {"stored_tokens": 0, "installed_tokens": 0, "recomputed_tokens": 0, "evicted_tokens": 0}

    def __contains__(self, key: bytes) -> bool:
        return key in self.passages

    def capture(self, cache, slots: torch.Tensor, key: bytes, position: int) -> None:
        """Keep the KV at `slots` (a passage written at `position`) under `key`."""
        rows = [cache.read(layer, slots) for layer in range(len(cache.k))]
        passage = StoredPassage([k.clone() for k, _ in rows], [v.clone() for _, v in rows], position)
        if key in self.passages or passage.num_tokens > self.capacity:
            return
        self.passages[key] = passage
        self.tokens += passage.num_tokens
        self.counts["stored_tokens"] += passage.num_tokens
        while self.tokens > self.capacity:
            _, dropped = self.passages.popitem(last=False)
            self.tokens -= dropped.num_tokens
            self.counts["evicted_tokens"] += dropped.num_tokens

    def install(self, cache, slots: torch.Tensor, key: bytes, position: int, recomputed: int = 0) -> None:
        """Write the stored passage `key` at `slots`, its keys turned from where it was computed to `position`
        (the step then computes its first `recomputed` tokens again)."""
        passage = self.passages[key]
        self.passages.move_to_end(key)
        for layer, (k, v) in enumerate(zip(passage.k, passage.v)):
            cache.write(layer, slots, self.rotation(k, position - passage.position), v)
        self.counts["installed_tokens"] += passage.num_tokens
        self.counts["recomputed_tokens"] += recomputed

    def stats(self) -> dict[str, int]:
        return {"passages": len(self.passages), "tokens": self.tokens, **self.counts}
