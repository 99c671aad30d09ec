"""Every attention backend: one call per layer whatever the number of sequences, equal to per-sequence attention."""
import random
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from orthrus_rag.engine import PoolingParams, SamplingParams
from orthrus_rag.engine.attention import BACKENDS, Geometry, sdpa_in_place, vllm_cpu
from orthrus_rag.engine.attention.hook import paged_attention
from orthrus_rag.engine.batch import ScheduledChunk
from orthrus_rag.engine.model_runner import pack_host, to_device
from orthrus_rag.engine.request import RequestTimings
from orthrus_rag.engine.sequence import Sequence
from tests.engine.conftest import DEVICE

HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 8, 4


def key_storages(engine, monkeypatch) -> list[bool]:
    """Run the engine to the end; for every key tensor attention was given, whether it lies in the cache's storage."""
    seen = []
    pools = {t.untyped_storage().data_ptr() for t in engine.runner.cache.k}

    def recorded(real):
        def call(q, k, v, *args, **kwargs):
            seen.append(k.untyped_storage().data_ptr() in pools)
            return real(q, k, v, *args, **kwargs)
        return call

    monkeypatch.setattr(sdpa_in_place.F, "scaled_dot_product_attention", recorded(F.scaled_dot_product_attention))
    for fused in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention"):
        monkeypatch.setattr(sdpa_in_place.torch.ops.aten, fused, recorded(getattr(torch.ops.aten, fused)))
    while engine.has_unfinished():
        engine.step()
    return seen


@pytest.mark.parametrize("num_seqs", [1, 16])
def test_attention_reads_keys_in_place(make_engine, monkeypatch, num_seqs):
    """Every key tensor attention multiplies is a view of the cache, in up to MAX_RUNS runs per sequence (here any
    number) with decodes attended one by one: no gathered or padded copy on any path (decodes, chunks, backbone
    embeddings, shared prefixes)."""
    monkeypatch.setattr(sdpa_in_place, "MAX_RUNS", 10**6)
    monkeypatch.setattr(sdpa_in_place, "MIN_BATCHED", 10**6)  # decodes one by one, each over views
    engine = make_engine(max_num_batched_tokens=256, max_num_seqs=32, attention_backend="sdpa_in_place")
    rng = random.Random(num_seqs)
    shared = " ".join(["shared"] * 40)  # full blocks shared through the prefix cache: tables of several runs
    for i in range(num_seqs):  # prompts of different lengths: chunks and decodes share steps
        words = shared + " " + " ".join(["token"] * rng.randrange(3, 40))
        engine.add_request(f"g{i}", words, SamplingParams(max_tokens=rng.randrange(2, 6), ignore_eos=True))
        if i % 4 == 0:
            engine.add_request(f"e{i}", words, PoolingParams(model="backbone"))
    seen = key_storages(engine, monkeypatch)
    assert seen and all(seen)


class Chunk:
    """A sequence with `ctx` tokens in the cache and `n` new ones this step."""

    def __init__(self, idx: int, ctx: int, n: int, table: list[int]):
        self.seq = Sequence(f"s{idx}", "generate", list(range(ctx + n)), RequestTimings(0.0), idx,
                            sampling=SamplingParams())
        self.seq.num_computed = ctx
        self.seq.block_table = table
        self.ctx, self.n = ctx, n


def reference(q, k, v, chunk: Chunk, causal: bool, window: int | None, scale: float) -> torch.Tensor:
    """Plain per-sequence attention with an explicit mask: queries at positions ctx .. ctx+n-1."""
    q_pos = torch.arange(chunk.ctx, chunk.ctx + chunk.n, device=q.device)[:, None]
    k_pos = torch.arange(chunk.ctx + chunk.n, device=q.device)[None, :]
    allowed = (k_pos <= q_pos) if causal else torch.ones_like(k_pos <= q_pos)
    if window is not None:
        allowed &= (q_pos - k_pos).abs() < window
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)


def fake_flash_varlen(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None, causal=False, window_size=(-1, -1),
                     block_table=None):
    """flash-attn's documented semantics written plainly: k/v are pages (blocks, page, kv_heads, d) read through each
    sequence's block table; queries aligned to the end of their keys; key j is seen by query position i when
    i - left <= j <= i + right (-1: unbounded), and j <= i when causal."""
    left, right = window_size
    outs = []
    for s in range(len(cu_q) - 1):
        n_k = int(cu_k[s + 1] - cu_k[s])
        qs = q[cu_q[s]:cu_q[s + 1]]
        ks, vs = (x[block_table[s]].flatten(0, 1)[:n_k] for x in (k, v))
        i = torch.arange(len(ks) - len(qs), len(ks), device=q.device)[:, None]
        j = torch.arange(len(ks), device=q.device)[None, :]
        allowed = torch.ones(len(qs), len(ks), dtype=torch.bool, device=q.device)
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


SHAPES = [(9, 1, True), (0, 7, True), (3, 6, True), (20, 1, True), (0, 5, False), (0, 1, False), (14, 1, True)]
VLLM = not vllm_cpu.unsupported(32, 16, torch.float32)


@dataclass
class Sizes:
    """Sizes of one attention test: vLLM's kernels take head dims of 32 and more and blocks of 16."""

    block: int = BLOCK
    dim: int = DIM
    scale: int = 1  # SHAPES' lengths (not the single-token decodes) times this

    def shapes(self) -> list[tuple[int, int, bool]]:
        return [(ctx * self.scale, n if n == 1 else n * self.scale, kv) for ctx, n, kv in SHAPES]


def tables(layout: str, geo: Sizes) -> list[list[int]]:
    """Block tables for the shapes: laid out one after another (one run each), or fragmented (blocks in reverse
    order and a shared first block: several runs per sequence, merged by log-sum-exp)."""
    out, next_block = [], 1
    for ctx, n, keeps_kv in geo.shapes():
        blocks = -(-(ctx + n) // geo.block) if keeps_kv else 0
        table = list(range(next_block, next_block + blocks))
        next_block += blocks
        if layout.startswith("fragmented") and blocks:
            table = [0] + table[1:][::-1] if ctx >= geo.block else table[::-1]  # block 0: the same keys everywhere
        out.append(table)
    return out


@pytest.mark.parametrize("backend,layout", [
    ("sdpa_in_place", "one_run"), ("sdpa_in_place", "fragmented"), ("sdpa_in_place", "fragmented_one_by_one"),
    ("flash_attn_paged", "fragmented"),
    ("flex_paged", "fragmented"),
    pytest.param("vllm_cpu", "fragmented", marks=pytest.mark.skipif(not VLLM, reason="vLLM CPU kernels absent"))])
@pytest.mark.parametrize("causal,window", [(True, None), (True, 5), (False, None), (False, 3)])
def test_packed_attention_equals_per_sequence_attention(causal, window, backend, layout, monkeypatch):
    """On the tests' device (ORTHRUS_TEST_DEVICE: the GPU check runs this on CUDA, FlexAttention compiled).
    sdpa_in_place attends the step's single-row chunks in one batched call, or (`fragmented_one_by_one`) each alone."""
    device = torch.device(DEVICE)
    if layout == "fragmented_one_by_one":
        monkeypatch.setattr(sdpa_in_place, "MIN_BATCHED", 10**6)
    if backend == "flash_attn_paged":  # the call's plumbing, against flash-attn's documented semantics
        monkeypatch.setitem(sys.modules, "flash_attn", SimpleNamespace(flash_attn_varlen_func=fake_flash_varlen))
    if backend == "vllm_cpu" and device.type != "cpu":
        pytest.skip("vLLM's kernels run on CPU only")
    geo = Sizes(16, 32, 4) if backend == "vllm_cpu" else Sizes()
    block, dim = geo.block, geo.dim
    torch.manual_seed(0)
    chunks = [Chunk(i, ctx, n, table) for i, ((ctx, n, _), table) in enumerate(zip(geo.shapes(), tables(layout, geo)))]
    runner = BACKENDS[backend](Geometry(device, torch.float32, block, HEADS, KV_HEADS, dim))
    cache = runner.make_cache(1, 64 * block)
    full_k = [torch.randn(KV_HEADS, c.ctx + c.n, dim).to(device) for c in chunks]
    full_v = [torch.randn(KV_HEADS, c.ctx + c.n, dim).to(device) for c in chunks]
    for c, k, v in zip(chunks, full_k, full_v):  # the context is already in the cache
        if c.ctx and c.seq.block_table[0] == 0:  # a shared first block holds the same keys for every sequence
            k[:, :block], v[:, :block] = full_k[0][:, :block], full_v[0][:, :block]
        slots = torch.tensor([c.seq.block_table[p // block] * block + p % block for p in range(c.ctx)],
                             dtype=torch.long, device=device)
        cache.write(0, slots, k[:, :c.ctx].transpose(0, 1), v[:, :c.ctx].transpose(0, 1))
    host = pack_host([ScheduledChunk(c.seq, c.n) for c in chunks], block, scratch_block=48)
    *_, meta = to_device(host, cache, runner, device)
    if backend == "sdpa_in_place" and layout == "fragmented_one_by_one":  # runs merged by log-sum-exp, and a copy
        assert max(len(s.runs) for s in meta.seqs) >= 3 and any(s.gather is not None for s in meta.seqs)
        assert meta.decodes is None
    elif backend == "sdpa_in_place":  # the four single-row chunks (one keeps no KV) in one call, the rest alone
        assert meta.decodes.lengths.tolist() == [10, 21, 1, 15] and all(s.n > 1 for s in meta.seqs)
    q = [torch.randn(HEADS, c.n, dim).to(device) for c in chunks]
    new_k = torch.cat([k[:, c.ctx:] for c, k in zip(chunks, full_k)], dim=1)[None]
    new_v = torch.cat([v[:, c.ctx:] for c, v in zip(chunks, full_v)], dim=1)[None]
    module = SimpleNamespace(layer_idx=0, is_causal=causal)
    out, _ = paged_attention(module, torch.cat(q, dim=1)[None], new_k, new_v, None, scaling=0.3,
                             sliding_window=window, orthrus_meta=meta)
    want = torch.cat([reference(qi, k, v, c, causal, window, 0.3).transpose(0, 1)
                      for qi, k, v, c in zip(q, full_k, full_v, chunks)])
    assert (out[0] - want).abs().max() < 1e-5


def test_key_runs_by_hand():
    from orthrus_rag.engine.attention.sdpa_in_place import KeyRun, key_runs

    assert key_runs([5, 6, 7], 40, 16) == [KeyRun(80, 0, 40)]
    assert key_runs([5, 6, 9, 10, 2, 99], 70, 16) == [KeyRun(80, 0, 32), KeyRun(144, 32, 32), KeyRun(32, 64, 6)]
    assert key_runs([3], 1, 16) == [KeyRun(48, 0, 1)]
