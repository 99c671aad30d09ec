"""Step metadata: the scheduled chunks packed on the host in one pass, moved to the device in one transfer.

Every chunk becomes a segment of the flat token row: its rows, the positions they take in their sequence, and the
block table its keys live in (its own, or scratch blocks past the pool when it keeps no KV). From the block table
come the runs of consecutive blocks that attention reads in place (see attention.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import accumulate

import torch

from orthrus_rag.engine.attention import (FLASH_PAGED, VLLM_CPU, AttentionMetadata, KernelLayout, KeyRun,
                                         SeqSlice)
from orthrus_rag.engine.batch import ScheduledChunk
from orthrus_rag.engine.kv_cache import PagedKVCache


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
