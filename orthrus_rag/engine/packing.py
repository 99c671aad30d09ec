"""Step metadata: the scheduled chunks packed on the host in one pass, moved to the device in one transfer.

Every chunk becomes a segment of the flat token row: its rows, the positions they take in their sequence, and the
block table its keys live in (its own, or scratch blocks past the pool when it keeps no KV). From these the query
tiles of the step's single attention call are laid out (see attention.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate

import torch

from orthrus_rag.engine.attention import FLASH_VARLEN, AttentionMetadata, TileLayout, VarlenLayout
from orthrus_rag.engine.batch import ScheduledChunk
from orthrus_rag.engine.kv_cache import PagedKVCache

GATHER_COST = 8  # cost of gathering one padded key row, in query-key products (CPU, measured: tiles of 16 win at 8 decodes + 256)


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


def choose_tile(seg_rows: list[tuple[int, int, int]]) -> int:
    """Queries per tile minimising padded work: tiles * width * (tile + gather cost)."""
    longest = max(n for _, n, _ in seg_rows)
    best, best_cost, tile = 1, None, 1
    while True:
        cost = sum(-(-n // tile) for _, n, _ in seg_rows) * (tile + GATHER_COST)
        if best_cost is None or cost < best_cost:
            best, best_cost = tile, cost
        if tile >= longest:
            return best
        tile *= 2


@dataclass
class DeviceStep:
    input_ids: torch.Tensor
    positions: torch.Tensor
    logit_rows: torch.Tensor
    meta: AttentionMetadata


def to_device(step: HostStep, cache: PagedKVCache, block_size: int, backend: str,
              device: torch.device) -> DeviceStep:
    """One host-to-device transfer for every integer of the step, then the layout on the device."""
    tile = choose_tile(step.seg_rows)
    tiles = _tiles(step.seg_rows, tile)
    width_blocks = max(len(t) for t in step.tables)
    tables = [t + [0] * (width_blocks - len(t)) for t in step.tables]
    key_len = [ctx + n for _, n, ctx in step.seg_rows]
    parts = [step.ids, step.positions, step.write_slots, step.logit_rows, key_len, [x for t in tables for x in t],
             list(accumulate((n for _, n, _ in step.seg_rows), initial=0)), list(accumulate(key_len, initial=0)), *tiles]
    flat = torch.tensor([x for p in parts for x in p], dtype=torch.long).to(device, non_blocking=True)
    (ids, positions, write_slots, logit_rows, key_len_d, tables_d, cu_q, cu_k, query_rows, query_pos, tile_seg,
     out_index) = flat.split([len(p) for p in parts])
    slots = _key_slots(tables_d.view(len(tables), width_blocks), key_len_d, max(key_len), block_size)
    meta = AttentionMetadata(cache, write_slots, backend)
    if backend == FLASH_VARLEN:
        j = torch.arange(slots.shape[1], device=device)
        meta.varlen = VarlenLayout(slots[j[None, :] < key_len_d[:, None]], cu_q.int(), cu_k.int(),
                                   max(n for _, n, _ in step.seg_rows), max(key_len))
    else:
        meta.tiles = TileLayout(tile, max(key_len), query_rows, query_pos.view(-1, tile),
                                slots.index_select(0, tile_seg).flatten(), key_len_d.index_select(0, tile_seg),
                                out_index)
    return DeviceStep(ids, positions, logit_rows, meta)


def _tiles(seg_rows: list[tuple[int, int, int]], tile: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per tile query: packed row and position (padding repeats the last query); per tile its chunk; per packed
    row its index in the flattened tile output."""
    query_rows, query_pos, tile_seg, out_index = [], [], [], []
    for s, (start, n, ctx) in enumerate(seg_rows):
        for a in range(0, n, tile):
            nq = min(tile, n - a)
            out_index.extend(range(len(query_rows), len(query_rows) + nq))
            query_rows.extend(start + a + min(i, nq - 1) for i in range(tile))
            query_pos.extend(ctx + a + min(i, nq - 1) for i in range(tile))
            tile_seg.append(s)
    return query_rows, query_pos, tile_seg, out_index


def _key_slots(tables: torch.Tensor, key_len: torch.Tensor, width: int, block_size: int) -> torch.Tensor:
    """(chunks, width) cache slot of each key position; past a chunk's keys, slot 0 (masked out)."""
    j = torch.arange(width, device=tables.device)
    slots = tables[:, j // block_size] * block_size + j % block_size
    return slots.masked_fill(j[None, :] >= key_len[:, None], 0)
