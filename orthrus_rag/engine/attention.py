"""Attention over a packed batch that reads the paged KV cache in place, registered as a transformers attention
implementation.

transformers runs its own model code (projections, RoPE, MLP, norms) over one flat row of packed tokens; for each
attention layer it calls `paged_attention` with the step's `AttentionMetadata` (the keyword argument
`orthrus_meta`). The function writes every row's K/V into the cache (chunks that keep no KV use scratch slots), then
attends each sequence to its own keys only, where the cache holds them, with one of the backends of docs/engine.md
("Attention over the paged cache").
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from orthrus_rag.engine import vllm_cpu
from orthrus_rag.engine.config import ATTENTION_BACKENDS
from orthrus_rag.engine.errors import InvalidRequestError
from orthrus_rag.engine.kv_cache import PagedKVCache

ATTN_IMPLEMENTATION = "orthrus_paged"
SDPA_IN_PLACE, FLASH_PAGED, VLLM_CPU = ATTENTION_BACKENDS
FLASH_PAGE = 256  # flash-attn 2 reads a paged cache only in pages of a multiple of 256 tokens


def choose_backend(requested: str, device: torch.device, block_size: int, head_dim: int, dtype: torch.dtype) -> str:
    """`auto`: vLLM's CPU kernels on CPU where they load and fit the model, flash-attn's paged kernel on CUDA where
    it is installed and the blocks are its pages, else SDPA in place. A named backend (one of ATTENTION_BACKENDS:
    EngineConfig.validate checks the name) that cannot run here is an InvalidRequestError saying why."""
    reasons = {SDPA_IN_PLACE: None,
               VLLM_CPU: "it runs on CPU only" if device.type != "cpu" else vllm_cpu.unsupported(head_dim, block_size,
                                                                                               dtype),
               FLASH_PAGED: _flash_unsupported(device, block_size)}
    if requested == "auto":
        return next(b for b in (VLLM_CPU, FLASH_PAGED, SDPA_IN_PLACE) if reasons[b] is None)
    if reasons[requested] is not None:
        raise InvalidRequestError(f"runtime.attention_backend={requested} cannot run here: {reasons[requested]}; "
                                  "use auto", "attention_backend")
    return requested


def _flash_unsupported(device: torch.device, block_size: int) -> str | None:
    if device.type != "cuda":
        return "it runs on CUDA only"
    if block_size % FLASH_PAGE:
        return f"block_size must be a multiple of {FLASH_PAGE}"
    return None if importlib.util.find_spec("flash_attn") is not None else "flash_attn is not installed"


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


@dataclass
class RunMask:
    """Which keys of a run the (folded) queries see: an additive bias (0 or -inf), and the query rows that see none
    of them (their log-sum-exp is -inf in the merge). Absent (None) where every query sees every key."""

    bias: torch.Tensor  # (group * n, run length)
    empty: torch.Tensor | None  # (group * n,) bool, None when no row is empty


@dataclass
class KernelLayout:
    """Per sequence its queries, keys and block table, as the paged kernels (vLLM CPU, flash-attn) read them."""

    block_table: torch.Tensor  # (S, max blocks) int32
    query_start: torch.Tensor  # (S + 1,) int32: cumulative query rows
    key_start: torch.Tensor  # (S + 1,) int32: cumulative keys
    seq_lens: torch.Tensor  # (S,) int32: keys of each sequence, this chunk included
    max_queries: int
    max_keys: int
    page: int  # tokens per block


@dataclass
class AttentionMetadata:
    cache: PagedKVCache
    write_slots: torch.Tensor  # (T,) cache slot of every packed row's K/V
    seqs: list[SeqSlice]
    backend: str = SDPA_IN_PLACE
    kernel: KernelLayout | None = None
    _masks: dict = field(default_factory=dict)
    _plans: dict = field(default_factory=dict)

    def plan(self, causal: bool, window: int | None, num_heads: int) -> torch.Tensor:
        """vLLM's work split for this step, built once per kind of layer."""
        key = (causal, window, num_heads)
        if key not in self._plans:
            c, k = self.cache, self.kernel
            self._plans[key] = vllm_cpu.schedule(num_heads, c.num_kv_heads, c.head_dim, k.seq_lens, c.dtype,
                                                 k.query_start, causal, window, c.variant)
        return self._plans[key]

    def run_masks(self, causal: bool, window: int | None, group: int) -> list[list[tuple[KeyRun, RunMask | None]]]:
        """Per sequence, the runs some query sees, each with its mask; built once per step, reused by every layer."""
        key = (causal, window, group)
        if key not in self._masks:
            self._masks[key] = [[(run, mask) for run in s.runs
                                 if (mask := _run_mask(s, run, causal, window, group, self.cache)) is not _UNSEEN]
                                for s in self.seqs]
        return self._masks[key]


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


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                    orthrus_meta: AttentionMetadata | None = None, **kwargs):
    """query (1, heads, T, d); key/value (1, kv_heads, T, d). Returns (1, T, heads, d) and no weights."""
    if orthrus_meta is None:
        raise RuntimeError("paged_attention needs orthrus_meta; run the model through ModelRunner")
    meta, layer = orthrus_meta, module.layer_idx
    meta.cache.write(layer, meta.write_slots, key[0].transpose(0, 1), value[0].transpose(0, 1))
    causal = getattr(module, "is_causal", True)
    q, lay, cache = query[0].transpose(0, 1), meta.kernel, meta.cache  # q: (T, heads, d)
    if meta.backend == VLLM_CPU:
        out = vllm_cpu.attend(q.to(cache.dtype).contiguous(), cache.k[layer], cache.v[layer], lay.query_start,
                              lay.seq_lens, lay.block_table, scaling or q.shape[-1] ** -0.5, causal, sliding_window,
                              meta.plan(causal, sliding_window, q.shape[1])).to(q.dtype)
    elif meta.backend == FLASH_PAGED:
        from flash_attn import flash_attn_varlen_func

        pages = (-1, lay.page, cache.num_kv_heads, cache.head_dim)
        left = -1 if sliding_window is None else sliding_window - 1
        out = flash_attn_varlen_func(q, cache.k[layer].view(pages), cache.v[layer].view(pages), lay.query_start,
                                     lay.key_start, lay.max_queries, lay.max_keys, softmax_scale=scaling, causal=causal,
                                     window_size=(left, left if not causal else 0), block_table=lay.block_table)
    else:
        out = _attend_in_place(meta, layer, q, scaling, causal, sliding_window)
    return out[None], None


def _attend_in_place(meta: AttentionMetadata, layer: int, q: torch.Tensor, scaling, causal: bool,
                     window: int | None) -> torch.Tensor:
    cache = meta.cache
    heads, dim, kv_heads = q.shape[1], q.shape[2], cache.num_kv_heads
    group = heads // kv_heads
    k_pool = cache.k[layer].view(-1, kv_heads, dim)
    v_pool = cache.v[layer].view(-1, kv_heads, dim)
    qc = q.to(cache.dtype)
    outs = []
    for s, runs in zip(meta.seqs, meta.run_masks(causal, window, group)):
        qs = qc[s.row:s.row + s.n].view(s.n, kv_heads, group, dim).permute(1, 2, 0, 3).reshape(
            1, kv_heads, group * s.n, dim)
        parts = [(k_pool[r.slot:r.slot + r.length].transpose(0, 1)[None],
                  v_pool[r.slot:r.slot + r.length].transpose(0, 1)[None], m) for r, m in runs]
        o = attend_runs(qs, parts, scaling)
        outs.append(o.view(kv_heads, group, s.n, dim).permute(2, 0, 1, 3).reshape(s.n, heads, dim))
    return torch.cat(outs).to(q.dtype)


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


def register() -> str:
    """Register the implementation with transformers (idempotent) and return its name."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, lambda *args, **kwargs: None)  # it masks by itself
    return ATTN_IMPLEMENTATION
