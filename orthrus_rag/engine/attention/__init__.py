"""Attention over the paged KV cache: one file per backend behind the interface of base.py, registered here;
`choose` picks one (choice.py), hook.py plugs the step's backend into transformers' model code."""
from __future__ import annotations

from orthrus_rag.engine.attention.base import AttentionBackend, Geometry, Segment, StepAttention
from orthrus_rag.engine.attention.choice import Choice
from orthrus_rag.engine.attention.choice import choose as _choose
from orthrus_rag.engine.attention.flash_paged import FlashPaged
from orthrus_rag.engine.attention.flex_paged import FlexPaged
from orthrus_rag.engine.attention.sdpa_in_place import SdpaInPlace
from orthrus_rag.engine.attention.vllm_cpu import VllmCpu

BACKENDS: dict[str, type[AttentionBackend]] = {b.name: b for b in (SdpaInPlace, FlexPaged, FlashPaged, VllmCpu)}


def choose(requested: str, geometry: Geometry) -> Choice:
    """`requested` (auto or one of BACKENDS) for `geometry`: see choice.py."""
    return _choose(requested, geometry, BACKENDS)


__all__ = ["BACKENDS", "AttentionBackend", "Choice", "Geometry", "Segment", "StepAttention", "choose"]
