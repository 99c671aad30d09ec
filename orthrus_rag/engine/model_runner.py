"""Runs one step of the generator: packs the scheduled chunks into one flat token row and does ONE forward pass.

The step's integers are packed on the host in one pass and moved to the device in one transfer. Every chunk becomes a
segment of the flat token row: its rows, the positions they take in their sequence, and the block table its keys live
in (its own, or scratch blocks past the pool when it keeps no KV). The attention backend (attention/) plans the step
from the segments and owns the KV cache; the runner does not know which backend runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from orthrus_rag.engine import attention
from orthrus_rag.engine.attention import AttentionBackend, Geometry, Segment, StepAttention
from orthrus_rag.engine.attention.hook import register
from orthrus_rag.engine.batch import ModelOutput, ScheduledChunk
from orthrus_rag.engine.block_manager import slots
from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.kv_cache import PagedKVCache, bytes_per_block, pool_size
from orthrus_rag.engine.lora import attach_embedding_adapter
from orthrus_rag.models import load_generator, resolve_device, resolve_dtype, set_threads


class ModelRunner:
    def __init__(self, config: EngineConfig):
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        self.num_threads = set_threads(config.num_threads)
        self.model, self.tokenizer = load_generator(config.generator, self.dtype, str(self.device), config.load_format)
        self.model.set_attn_implementation(register())
        self.adapter = attach_embedding_adapter(self.model, config.embedding_adapter) \
            if config.embedding_adapter else None
        text_config = self.model.config.get_text_config()
        self.max_model_len = config.max_model_len or text_config.max_position_embeddings
        self.hidden_size = text_config.hidden_size
        self.block_size = config.block_size
        heads = text_config.num_attention_heads
        head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // heads
        kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
        self.attention_choice = attention.choose(config.attention_backend, Geometry(
            self.device, self.dtype, config.block_size, heads, kv_heads, head_dim))
        self.attention: AttentionBackend = self.attention_choice.backend
        scratch = -(-config.max_num_batched_tokens // config.block_size) + config.max_num_seqs
        layers = text_config.num_hidden_layers
        self.num_kv_blocks = config.num_kv_blocks or pool_size(
            self.device, bytes_per_block(layers, config.block_size, kv_heads, head_dim, self.attention.cache_dtype),
            config.kv_memory_fraction, scratch,
            most=config.max_num_seqs * -(-self.max_model_len // config.block_size))
        self.scratch_block = self.num_kv_blocks  # scratch blocks follow the pool: one step's KV-less chunks
        self.cache = self.attention.make_cache(layers, (self.num_kv_blocks + scratch) * config.block_size)

    def synchronize(self) -> None:
        """Wait for the device's queued work, so a step's measured time is its real time (no-op on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def execute(self, chunks: list[ScheduledChunk]) -> ModelOutput:
        if torch.get_num_threads() != self.num_threads:  # the step may run on another thread than the constructor
            set_threads(self.num_threads)
        host = pack_host(chunks, self.block_size, self.scratch_block)
        ids, positions, logit_rows, meta = to_device(host, self.cache, self.attention, self.device)
        if self.adapter is not None:
            self.adapter.start = host.embed_start
        out = self.model(input_ids=ids[None], position_ids=positions[None], use_cache=False,
                         logits_to_keep=logit_rows if host.logit_rows else 1,
                         output_hidden_states=bool(host.pooled), orthrus_meta=meta)
        result = ModelOutput()
        if host.logit_rows:
            result.logit_ids, result.logits = host.logit_ids, out.logits[0]
        if host.pooled:
            hidden = out.hidden_states[-1][0]
            result.hidden = {rid: hidden[s:e] for rid, s, e in host.pooled}
        return result


@dataclass
class HostStep:
    """Flat integer lists of one step, built on the host."""

    ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    write_slots: list[int] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)  # per chunk: its rows, context and block table
    logit_rows: list[int] = field(default_factory=list)
    logit_ids: list[str] = field(default_factory=list)
    pooled: list[tuple[str, int, int]] = field(default_factory=list)
    embed_start: int | None = None


def pack_host(chunks: list[ScheduledChunk], block_size: int, scratch_block: int) -> HostStep:
    step = HostStep()
    for chunk in chunks:
        seq, n, ctx = chunk.seq, chunk.num_tokens, chunk.seq.num_computed
        if seq.kind == "embed" and step.embed_start is None:
            step.embed_start = len(step.ids)
        table = seq.block_table
        if not table:  # keeps no KV: scratch blocks for this step only
            table = list(range(scratch_block, scratch_block + -(-(ctx + n) // block_size)))
            scratch_block += len(table)
        for first, end in [*chunk.recompute, (ctx, ctx + n)]:  # recomputed passage runs come before the chunk
            start = len(step.ids)
            step.ids.extend(seq.tokens(first, end))
            step.positions.extend(range(first, end))
            step.write_slots.extend(slots(table, block_size, first, end))
            step.segments.append(Segment(start, end - first, first, table))
        if seq.kind == "embed":
            step.pooled.append((seq.request_id, start, start + n))
        elif chunk.completes:
            step.logit_rows.append(start + n - 1)
            step.logit_ids.append(seq.request_id)
    return step


def to_device(step: HostStep, cache: PagedKVCache, backend: AttentionBackend,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, StepAttention]:
    """Token ids, positions, logit rows and the step's attention plan: one host-to-device transfer for every integer
    of the step, the backend's own included."""
    extra = backend.host_integers(step.segments)
    parts = [step.ids, step.positions, step.write_slots, step.logit_rows, *extra]
    flat = torch.tensor([x for p in parts for x in p], dtype=torch.long).to(device, non_blocking=True)
    ids, positions, write_slots, logit_rows, *integers = flat.split([len(p) for p in parts])
    return ids, positions, logit_rows, backend.plan(cache, write_slots, step.segments, integers)
