"""The step's attention: one call per layer whatever the number of sequences, equal to per-sequence attention."""
import random
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from orthrus_rag.engine import PoolingParams, SamplingParams
from orthrus_rag.engine.attention import paged_attention
from orthrus_rag.engine.batch import ScheduledChunk
from orthrus_rag.engine.kv_cache import PagedKVCache
from orthrus_rag.engine.packing import pack_host, to_device
from orthrus_rag.engine.request import RequestTimings
from orthrus_rag.engine.sequence import Sequence

HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 8, 4


def sdpa_calls_per_step(engine) -> list[int]:
    """Run the engine to the end; per step, the scaled_dot_product_attention calls seen by the profiler."""
    counts = []
    while engine.has_unfinished():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            engine.step()
        counts.append(sum(e.name == "aten::scaled_dot_product_attention" for e in prof.events()))
    return counts


@pytest.mark.parametrize("num_seqs", [1, 16])
def test_one_attention_call_per_layer_per_step(make_engine, num_seqs):
    engine = make_engine(max_num_batched_tokens=256, max_num_seqs=32)
    layers = engine.runner.model.config.num_hidden_layers
    rng = random.Random(num_seqs)
    for i in range(num_seqs):  # prompts of different lengths: chunks and decodes share steps
        words = " ".join(["token"] * rng.randrange(3, 40))
        engine.add_request(f"g{i}", words, SamplingParams(max_tokens=rng.randrange(2, 6), ignore_eos=True))
        if i % 4 == 0:
            engine.add_request(f"e{i}", words, PoolingParams(model="backbone"))
    counts = sdpa_calls_per_step(engine)
    assert counts and all(c == layers for c in counts), counts


class Chunk:
    """A sequence with `ctx` tokens in the cache and `n` new ones this step."""

    def __init__(self, idx: int, ctx: int, n: int, keeps_kv: bool, next_block: int):
        self.seq = Sequence(f"s{idx}", "generate", list(range(ctx + n)), RequestTimings(0.0), idx,
                            sampling=SamplingParams())
        self.seq.num_computed = ctx
        blocks = -(-(ctx + n) // BLOCK) if keeps_kv else 0
        self.seq.block_table = list(range(next_block, next_block + blocks))
        self.ctx, self.n = ctx, n


def reference(q, k, v, chunk: Chunk, causal: bool, window: int | None, scale: float) -> torch.Tensor:
    """Plain per-sequence attention with an explicit mask: queries at positions ctx .. ctx+n-1."""
    q_pos = torch.arange(chunk.ctx, chunk.ctx + chunk.n)[:, None]
    k_pos = torch.arange(chunk.ctx + chunk.n)[None, :]
    allowed = (k_pos <= q_pos) if causal else torch.ones_like(k_pos <= q_pos)
    if window is not None:
        allowed &= (q_pos - k_pos).abs() < window
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)


def fake_flash_varlen(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None, causal=False, window_size=(-1, -1)):
    """flash-attn's documented semantics written plainly: queries aligned to the end of their keys; key j is seen by
    query position i when i - left <= j <= i + right (-1: unbounded), and j <= i when causal."""
    left, right = window_size
    outs = []
    for s in range(len(cu_q) - 1):
        qs, ks, vs = q[cu_q[s]:cu_q[s + 1]], k[cu_k[s]:cu_k[s + 1]], v[cu_k[s]:cu_k[s + 1]]
        i = torch.arange(len(ks) - len(qs), len(ks))[:, None]
        j = torch.arange(len(ks))[None, :]
        allowed = torch.ones(len(qs), len(ks), dtype=torch.bool)
        if causal:
            allowed &= j <= i
        if left >= 0:
            allowed &= j >= i - left
        if right >= 0:
            allowed &= j <= i + right
        o = F.scaled_dot_product_attention(qs.transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1),
                                           attn_mask=allowed, scale=softmax_scale, enable_gqa=True)
        outs.append(o.transpose(0, 1))
    assert max_q == max(int(cu_q[s + 1] - cu_q[s]) for s in range(len(cu_q) - 1))
    return torch.cat(outs)


@pytest.mark.parametrize("backend", ["sdpa_tiled", "flash_attn_varlen"])
@pytest.mark.parametrize("causal,window", [(True, None), (True, 5), (False, None), (False, 3)])
def test_packed_attention_equals_per_sequence_attention(causal, window, backend, monkeypatch):
    if backend == "flash_attn_varlen":  # the call's plumbing, against flash-attn's documented semantics
        monkeypatch.setitem(sys.modules, "flash_attn", SimpleNamespace(flash_attn_varlen_func=fake_flash_varlen))
    torch.manual_seed(0)
    shapes = [(9, 1, True), (0, 7, True), (3, 6, True), (20, 1, True), (0, 5, False), (0, 1, False), (14, 1, True)]
    chunks, next_block = [], 0
    for i, (ctx, n, keeps_kv) in enumerate(shapes):
        chunks.append(Chunk(i, ctx, n, keeps_kv, next_block))
        next_block += len(chunks[-1].seq.block_table)
    cache = PagedKVCache(1, 64 * BLOCK, KV_HEADS, DIM, torch.float32, torch.device("cpu"))
    full_k = [torch.randn(KV_HEADS, c.ctx + c.n, DIM) for c in chunks]
    full_v = [torch.randn(KV_HEADS, c.ctx + c.n, DIM) for c in chunks]
    for c, k, v in zip(chunks, full_k, full_v):  # the context is already in the cache
        slots = torch.tensor([c.seq.block_table[p // BLOCK] * BLOCK + p % BLOCK for p in range(c.ctx)], dtype=torch.long)
        cache.write(0, slots, k[:, :c.ctx].transpose(0, 1), v[:, :c.ctx].transpose(0, 1))
    host = pack_host([ScheduledChunk(c.seq, c.n) for c in chunks], BLOCK, scratch_block=40)
    step = to_device(host, cache, BLOCK, backend, torch.device("cpu"))
    q = [torch.randn(HEADS, c.n, DIM) for c in chunks]
    new_k = torch.cat([k[:, c.ctx:] for c, k in zip(chunks, full_k)], dim=1)[None]
    new_v = torch.cat([v[:, c.ctx:] for c, v in zip(chunks, full_v)], dim=1)[None]
    module = SimpleNamespace(layer_idx=0, is_causal=causal)
    out, _ = paged_attention(module, torch.cat(q, dim=1)[None], new_k, new_v, None, scaling=0.3,
                             sliding_window=window, orthrus_meta=step.meta)
    want = torch.cat([reference(qi, k, v, c, causal, window, 0.3).transpose(0, 1)
                      for qi, k, v, c in zip(q, full_k, full_v, chunks)])
    assert (out[0] - want).abs().max() < 1e-5
