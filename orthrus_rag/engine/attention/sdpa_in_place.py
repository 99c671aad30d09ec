"""torch's fused SDPA over views of the cache, on any device: a sequence's block table is cut into runs of
consecutive blocks, each run one view; several runs are merged exactly by their log-sum-exp. A sequence in more than
MAX_RUNS runs (sequences that decode side by side grow into blocks in turns) is gathered into one copy of its keys
instead: past a few runs, the calls cost more than the copy (index_select: on CPU several times faster than
indexing with a tensor). The step's single-row chunks (decodes) are attended in one batched call per layer instead
of one each: their keys gathered into one padded copy, the padding masked."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from orthrus_rag.engine.attention.base import AttentionBackend, Segment, StepAttention
from orthrus_rag.engine.kv_cache import PagedKVCache

MAX_RUNS = 4  # more runs than this: one gathered copy (docs/engine.md gives the measurement)
MIN_BATCHED = 2  # single-row chunks in one step from which they are attended in one batched call


@dataclass(frozen=True)
class KeyRun:
    """Keys [pos, pos + length) of one sequence, held in consecutive cache slots from `slot` on."""

    slot: int
    pos: int
    length: int


@dataclass
class SeqSlice:
    """One sequence's chunk in the packed step: rows [row, row + n) at positions [ctx, ctx + n); its keys (the
    context and the chunk) in runs."""

    row: int
    n: int
    ctx: int
    runs: list[KeyRun]
    gather: torch.Tensor | None = None  # the slots of its keys in order, where they are gathered (one run)


@dataclass
class RunMask:
    """Which keys of a run the (folded) queries see: an additive bias (0 or -inf), and the query rows that see none
    of them (their log-sum-exp is -inf in the merge). Absent (None) where every query sees every key."""

    bias: torch.Tensor  # (group * n, run length)
    empty: torch.Tensor | None  # (group * n,) bool, None when no row is empty


@dataclass
class DecodeBatch:
    """The step's single-row chunks, attended together: their rows, and the slots of each one's keys in order,
    padded to the longest (the padding masked)."""

    rows: torch.Tensor  # (B,) packed row of each
    slots: torch.Tensor  # (B, L), contiguous
    lengths: torch.Tensor  # (B,) keys of each: its context and itself
    _bias: dict = field(default_factory=dict)
    _keys: list[torch.Tensor] = field(default_factory=list)  # the gathered K and V, reused by every layer

    def gathered(self, k_pool: torch.Tensor, v_pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's keys and values, (B, kv_heads, L, d) views of buffers written again for each layer (one
        allocation per step: on CPU a fresh one per layer costs its page faults every time)."""
        flat = self.slots.view(-1)
        if not self._keys:
            self._keys = [pool.new_empty((len(flat), *pool.shape[1:])) for pool in (k_pool, v_pool)]
        shape = (*self.slots.shape, *k_pool.shape[1:])
        return tuple(torch.index_select(pool, 0, flat, out=buf).view(shape).transpose(1, 2)
                     for pool, buf in zip((k_pool, v_pool), self._keys))

    def bias(self, window: int | None, dtype: torch.dtype) -> torch.Tensor:
        """(B, 1, 1, L): 0 where a row sees the key, -inf on padding and, with a window, keys too far back."""
        if window not in self._bias:
            length = self.lengths[:, None]
            keys = torch.arange(self.slots.shape[1], device=length.device)[None, :]
            seen = keys < length if window is None else (keys < length) & (length - 1 - keys < window)
            bias = torch.zeros(seen.shape, dtype=dtype, device=length.device).masked_fill_(~seen, float("-inf"))
            self._bias[window] = bias[:, None, None]
        return self._bias[window]


@dataclass
class SdpaStep(StepAttention):
    seqs: list[SeqSlice] = field(default_factory=list)  # attended one by one
    decodes: DecodeBatch | None = None
    _masks: dict = field(default_factory=dict)

    def run_masks(self, causal: bool, window: int | None, group: int) -> list[list[tuple[KeyRun, RunMask | None]]]:
        """Per sequence, the runs some query sees, each with its mask; built once per step, reused by every layer."""
        key = (causal, window, group)
        if key not in self._masks:
            self._masks[key] = [[(run, mask) for run in s.runs
                                 if (mask := _run_mask(s, run, causal, window, group, self.cache)) is not _UNSEEN]
                                for s in self.seqs]
        return self._masks[key]


class SdpaInPlace(AttentionBackend):
    name = "sdpa_in_place"

    @property
    def cache_dtype(self) -> torch.dtype:
        """float32 on CPU: torch's bf16 CPU kernel is several times slower for small queries."""
        return torch.float32 if self.geometry.device.type == "cpu" else self.geometry.dtype

    def host_integers(self, segments: list[Segment]) -> list[list[int]]:
        """The batched decodes' rows, key counts and block tables (padded to the widest), then every other chunk's
        blocks: each sequence's key slots are then found on the device from its blocks."""
        singles, others = _split(segments)
        tables = [s.key_blocks(self.geometry.block_size) for s in singles]
        width = max(map(len, tables), default=0)
        return [[s.row for s in singles], [s.num_keys for s in singles],
                [b for t in tables for b in t + [0] * (width - len(t))],
                [b for s in others for b in s.key_blocks(self.geometry.block_size)]]

    def plan(self, cache, write_slots, segments, device_integers) -> SdpaStep:
        block = self.geometry.block_size
        rows, lengths, tables, other_tables = device_integers
        singles, others = _split(segments)
        decodes = None
        if singles:
            longest = max(s.num_keys for s in singles)
            decodes = DecodeBatch(rows, table_slots(tables.view(len(singles), -1), block, longest).contiguous(),
                                  lengths)
        seqs = []
        for s, table in zip(others, other_tables.split([len(s.key_blocks(block)) for s in others])):
            runs = key_runs(s.table, s.num_keys, block)
            gather = table_slots(table[None], block, s.num_keys)[0] if len(runs) > MAX_RUNS else None
            seqs.append(SeqSlice(s.row, s.n, s.ctx, [KeyRun(-1, 0, s.num_keys)] if gather is not None else runs,
                                 gather))
        return SdpaStep(self, cache, write_slots, seqs, decodes)

    def attend(self, step: SdpaStep, layer, q, scale, causal, window) -> torch.Tensor:
        cache = step.cache
        heads, dim, kv_heads = q.shape[1], q.shape[2], cache.num_kv_heads
        group = heads // kv_heads
        k_pool = cache.k[layer].view(-1, kv_heads, dim)
        v_pool = cache.v[layer].view(-1, kv_heads, dim)
        qc = q.to(cache.dtype)
        out = torch.empty_like(qc)
        if step.decodes is not None:
            out.index_copy_(0, step.decodes.rows, _attend_decodes(step.decodes, qc, k_pool, v_pool, scale, window))
        for s, runs in zip(step.seqs, step.run_masks(causal, window, group)):
            qs = qc[s.row:s.row + s.n].view(s.n, kv_heads, group, dim).permute(1, 2, 0, 3).reshape(
                1, kv_heads, group * s.n, dim)
            if s.gather is not None:
                parts = [(k_pool.index_select(0, s.gather).transpose(0, 1)[None],
                          v_pool.index_select(0, s.gather).transpose(0, 1)[None], m) for _, m in runs]
            else:
                parts = [(k_pool[r.slot:r.slot + r.length].transpose(0, 1)[None],
                          v_pool[r.slot:r.slot + r.length].transpose(0, 1)[None], m) for r, m in runs]
            o = attend_runs(qs, parts, scale)
            out[s.row:s.row + s.n] = o.view(kv_heads, group, s.n, dim).permute(2, 0, 1, 3).reshape(s.n, heads, dim)
        return out.to(q.dtype)


def _attend_decodes(batch: DecodeBatch, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                    scale: float | None, window: int | None) -> torch.Tensor:
    """Every single-row chunk against its own keys in one fused call: (B, heads, d). A row at position p sees keys
    0..p whether the layer is causal or not (nothing after it is cached yet)."""
    rows, (kv_heads, dim) = len(batch.rows), k_pool.shape[1:]
    qd = q.index_select(0, batch.rows).view(rows, kv_heads, -1, dim)  # each kv head's query heads as its rows
    k, v = batch.gathered(k_pool, v_pool)
    o = F.scaled_dot_product_attention(qd, k, v, attn_mask=batch.bias(window, q.dtype), scale=scale)
    return o.reshape(rows, -1, dim)


def _split(segments: list[Segment]) -> tuple[list[Segment], list[Segment]]:
    """The single-row chunks attended in one batched call (none below MIN_BATCHED of them), and the rest."""
    singles = [s for s in segments if s.n == 1]
    if len(singles) < MIN_BATCHED:
        return [], segments
    return singles, [s for s in segments if s.n != 1]


def table_slots(tables: torch.Tensor, block_size: int, length: int) -> torch.Tensor:
    """(S, length): the cache slots of the first `length` keys of each block table (S, blocks); past a table's own
    blocks, slots of its padding block."""
    offsets = torch.arange(block_size, device=tables.device)
    return (tables[:, :, None] * block_size + offsets).view(len(tables), -1)[:, :length]


def key_runs(table: list[int], num_keys: int, block_size: int) -> list[KeyRun]:
    """The sequence's first `num_keys` keys as runs of consecutive blocks: each run is one view of the cache."""
    blocks = -(-num_keys // block_size)
    starts = [0, *(j for j in range(1, blocks) if table[j] != table[j - 1] + 1), blocks]
    return [KeyRun(table[a] * block_size, a * block_size, min(b * block_size, num_keys) - a * block_size)
            for a, b in zip(starts, starts[1:])]


_UNSEEN = object()  # a run no query of the chunk sees


def _run_mask(s: SeqSlice, run: KeyRun, causal: bool, window: int | None, group: int, cache: PagedKVCache):
    last_q, last_k = s.ctx + s.n - 1, run.pos + run.length - 1
    sees_all = (not causal or last_k <= s.ctx) and (
        window is None or max(last_q - run.pos, last_k - s.ctx if not causal else 0) < window)
    if sees_all:
        return None
    q_pos = torch.arange(s.ctx, s.ctx + s.n)[:, None]
    k_pos = torch.arange(run.pos, run.pos + run.length)[None, :]
    allowed = torch.ones(s.n, run.length, dtype=torch.bool)
    if causal:
        allowed &= k_pos <= q_pos
    if window is not None:
        allowed &= (q_pos - k_pos).abs() < window  # two-sided when bidirectional
    if not allowed.any():
        return _UNSEEN
    allowed = allowed.repeat(group, 1)  # folded query rows: group-major, then position
    bias = torch.zeros(allowed.shape, dtype=cache.dtype).masked_fill_(~allowed, float("-inf"))
    empty = ~allowed.any(1)
    device = cache.k[0].device
    return RunMask(bias.to(device), empty.to(device) if empty.any() else None)


def attend_runs(q: torch.Tensor, parts: list[tuple[torch.Tensor, torch.Tensor, RunMask | None]],
                scale: float | None) -> torch.Tensor:
    """q (1, kv_heads, rows, d) against the union of the runs' keys (each (1, kv_heads, length, d), views): one
    fused call per run, merged by each run's log-sum-exp."""
    if len(parts) == 1:
        k, v, m = parts[0]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None if m is None else m.bias, scale=scale)
    outs, lses = zip(*(_run_with_lse(q, k, v, m, scale) for k, v, m in parts))
    lse = torch.stack(lses)  # (runs, 1, kv_heads, rows)
    weights = (lse - lse.logsumexp(0)).exp()
    return (torch.stack(outs) * weights[..., None]).sum(0)


def _run_with_lse(q, k, v, m: RunMask | None, scale) -> tuple[torch.Tensor, torch.Tensor]:
    """One run's output and log-sum-exp. On CUDA the memory-efficient kernel, which returns the log-sum-exp padded to
    32 rows and needs its bias rows to start on 16-element boundaries, so the bias is laid out in rows of a padded
    width."""
    rows, bias = q.shape[2], None if m is None else m.bias
    if q.device.type == "cpu":
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=bias,
                                                                            scale=scale)
    else:
        if bias is not None:
            keys = bias.shape[1]
            bias = bias.new_zeros(rows, -(-keys // 16) * 16)[:, :keys].copy_(bias)
            bias = bias[None, None].expand(1, q.shape[1], rows, keys)
        o, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, False,
                                                                             scale=scale)
        lse = lse[..., :rows]
    if m is not None and m.empty is not None:  # rows that see nothing of this run: weight 0, output 0 (not NaN)
        lse = lse.masked_fill(m.empty, float("-inf"))
        o = o.masked_fill(m.empty[:, None], 0.0)
    return o, lse
