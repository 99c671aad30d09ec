"""Runs one step of the generator: packs the scheduled chunks into one flat token row and does ONE forward pass.

The step's integers are packed on the host in one pass and moved to the device in one transfer. Every chunk becomes a
segment of the flat token row: its rows, the positions they take in their sequence, and the block table its keys live
in (its own, or scratch blocks past the pool when it keeps no KV). From the block table come the runs of consecutive
blocks that attention reads in place (see attention.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import accumulate

import torch

from orthrus_rag.engine import attention, vllm_cpu
from orthrus_rag.engine.attention import FLASH_PAGED, VLLM_CPU, AttentionMetadata, KernelLayout, KeyRun, SeqSlice
from orthrus_rag.engine.batch import ModelOutput, ScheduledChunk
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
        self.model.set_attn_implementation(attention.register())
        self.adapter = attach_embedding_adapter(self.model, config.embedding_adapter) \
            if config.embedding_adapter else None
        text_config = self.model.config.get_text_config()
        self.max_model_len = config.max_model_len or text_config.max_position_embeddings
        self.hidden_size = text_config.hidden_size
        self.block_size = config.block_size
        heads = text_config.num_attention_heads
        head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // heads
        kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
        scratch = -(-config.max_num_batched_tokens // config.block_size) + config.max_num_seqs
        self.attention_backend = attention.choose_backend(config.attention_backend, self.device, config.block_size,
                                                          head_dim, self.dtype)
        # SDPA on CPU attends in float32 (torch's bf16 CPU kernel is several times slower for small queries).
        sdpa_on_cpu = self.device.type == "cpu" and self.attention_backend == attention.SDPA_IN_PLACE
        cache_dtype = torch.float32 if sdpa_on_cpu else self.dtype
        layers = text_config.num_hidden_layers
        self.num_kv_blocks = config.num_kv_blocks or pool_size(
            self.device, bytes_per_block(layers, config.block_size, kv_heads, head_dim, cache_dtype),
            config.kv_memory_fraction, scratch,
            most=config.max_num_seqs * -(-self.max_model_len // config.block_size))
        self.scratch_block = self.num_kv_blocks  # scratch blocks follow the pool: one step's KV-less chunks
        blocked = self.attention_backend == VLLM_CPU
        self.cache = PagedKVCache(layers, (self.num_kv_blocks + scratch) * config.block_size, kv_heads, head_dim,
                                  cache_dtype, self.device, "blocked" if blocked else "flat", config.block_size,
                                  vllm_cpu.isa(cache_dtype, config.block_size, head_dim) if blocked else "")

    def synchronize(self) -> None:
        """Wait for the device's queued work, so a step's measured time is its real time (no-op on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def execute(self, chunks: list[ScheduledChunk]) -> ModelOutput:
        if torch.get_num_threads() != self.num_threads:  # the step may run on another thread than the constructor
            set_threads(self.num_threads)
        host = pack_host(chunks, self.block_size, self.scratch_block)
        ids, positions, logit_rows, meta = to_device(host, self.cache, self.block_size, self.attention_backend,
                                                     self.device)
        if self.adapter is not None:
            self.adapter.start = host.embed_start
        out = self.model(input_ids=ids[None], position_ids=positions[None], use_cache=False,
                         logits_to_keep=logit_rows if host.logit_rows else 1,
                         output_hidden_states=bool(host.pooled), orthrus_meta=meta)
        result = ModelOutput()
        if host.logit_rows:
            result.logits = dict(zip(host.logit_ids, out.logits[0]))
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
    seg_rows: list[tuple[int, int, int]] = field(default_factory=list)  # (first row, queries, context) per chunk
    tables: list[list[int]] = field(default_factory=list)  # block table per chunk
    logit_rows: list[int] = field(default_factory=list)
    logit_ids: list[str] = field(default_factory=list)
    pooled: list[tuple[str, int, int]] = field(default_factory=list)
    embed_start: int | None = None


def pack_host(chunks: list[ScheduledChunk], block_size: int, scratch_block: int) -> HostStep:
    step = HostStep()
    for chunk in chunks:
        seq, n, start, ctx = chunk.seq, chunk.num_tokens, len(step.ids), chunk.seq.num_computed
        if seq.kind == "embed" and step.embed_start is None:
            step.embed_start = start
        table = seq.block_table
        if not table:  # keeps no KV: scratch blocks for this step only
            table = list(range(scratch_block, scratch_block + -(-(ctx + n) // block_size)))
            scratch_block += len(table)
        step.ids.extend(seq.token_ids[ctx:ctx + n])
        step.positions.extend(range(ctx, ctx + n))
        step.write_slots.extend(table[p // block_size] * block_size + p % block_size for p in range(ctx, ctx + n))
        step.seg_rows.append((start, n, ctx))
        step.tables.append(table)
        if seq.kind == "embed":
            step.pooled.append((seq.request_id, start, start + n))
        elif chunk.completes:
            step.logit_rows.append(start + n - 1)
            step.logit_ids.append(seq.request_id)
    return step


def key_runs(table: list[int], num_keys: int, block_size: int) -> list[KeyRun]:
    """The sequence's first `num_keys` keys as runs of consecutive blocks: each run is one view of the cache."""
    runs: list[KeyRun] = []
    for j in range(-(-num_keys // block_size)):
        length = min(block_size, num_keys - j * block_size)
        if j and table[j] == table[j - 1] + 1:
            runs[-1] = replace(runs[-1], length=runs[-1].length + length)
        else:
            runs.append(KeyRun(table[j] * block_size, j * block_size, length))
    return runs


def to_device(step: HostStep, cache: PagedKVCache, block_size: int, backend: str,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Token ids, positions, logit rows and attention metadata: one host-to-device transfer for every integer of the
    step; key runs stay host integers (cache views)."""
    paged = backend in (FLASH_PAGED, VLLM_CPU)  # the kernel reads block tables; SDPA reads runs of blocks
    seqs = [] if paged else [SeqSlice(start, n, ctx, key_runs(table, ctx + n, block_size))
                             for (start, n, ctx), table in zip(step.seg_rows, step.tables)]
    parts = [step.ids, step.positions, step.write_slots, step.logit_rows]
    if paged:
        width = max(len(t) for t in step.tables)
        key_lens = [ctx + n for _, n, ctx in step.seg_rows]
        parts += [[x for t in step.tables for x in t + [0] * (width - len(t))],
                  list(accumulate((n for _, n, _ in step.seg_rows), initial=0)),
                  list(accumulate(key_lens, initial=0)), key_lens]
    flat = torch.tensor([x for p in parts for x in p], dtype=torch.long).to(device, non_blocking=True)
    ids, positions, write_slots, logit_rows, *kernel = flat.split([len(p) for p in parts])
    meta = AttentionMetadata(cache, write_slots, seqs, backend)
    if paged:
        tables, cu_q, cu_k, seq_lens = (x.int() for x in kernel)
        meta.kernel = KernelLayout(tables.view(len(key_lens), -1), cu_q, cu_k, seq_lens,
                                   max(n for _, n, _ in step.seg_rows), max(key_lens), block_size)
    return ids, positions, logit_rows, meta
