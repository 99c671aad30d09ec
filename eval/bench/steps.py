"""Step micro-benchmark (`orthrus-rag-bench workload=steps`): fixed step shapes through the model runner and through
transformers; what each column is: docs/benchmarks.md (Engine steps).

`engine_ms` is one engine step of that shape through the model runner (packing, forward with the paged attention,
batched sampling of the rows that sample), the KV context already in the cache. bench.json: `{"workload": "steps",
"steps": {SHAPE: {THREADS: {"engine_ms", "hf_ms", "hf_cached_ms", "attention_share", "host_ms", "floor_ms"[,
"profile"]}}}, ...}`; `host_ms` is the step's time outside the model's forward.
"""
from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from orthrus_rag.engine import EngineConfig, PoolingParams, SamplingParams
from orthrus_rag.engine.attention import hook
from orthrus_rag.engine.batch import ScheduledChunk
from orthrus_rag.engine.block_manager import BlockManager
from orthrus_rag.engine.model_runner import ModelRunner
from orthrus_rag.engine.request import RequestTimings
from orthrus_rag.engine.sampler import sample_batch
from orthrus_rag.engine.sequence import Sequence, Status
from orthrus_rag.models import load_generator
from orthrus_rag.models.device import native_bf16
from orthrus_rag.settings import UserError, check_settings, plain, typed

from ..experiment.markdown import markdown_table


@dataclass
class StepShape:
    decodes: int = 0  # single-token decode rows, each with `context` tokens already cached
    prefill: int = 0  # tokens of one prompt chunk, after `prefill_context` cached tokens of the same prompt
    prefill_context: int = 0  # cached tokens of the prefill chunk's prompt before it
    context: int | None = None  # cached tokens of each decode row; None: the workload's `context`
    embeds: int = 0  # backbone embedding chunks (one chunk each, no KV kept)
    embed_tokens: int = 0  # tokens per embedding chunk

    @property
    def num_tokens(self) -> int:
        return self.decodes + self.prefill + self.embeds * self.embed_tokens


@dataclass
class StepsWorkload:
    name: str = "steps"
    context: int = 300
    shapes: dict[str, StepShape] = field(default_factory=dict)
    threads: list[int] = field(default_factory=lambda: [1, 2])
    warmup: int = 2
    repeats: int = 7
    seed: int = 0
    profile: bool = False  # also profile each shape's engine step (top operators by self CPU time)

    @classmethod
    def from_dict(cls, spec: dict) -> StepsWorkload:
        """The workload from its config group, each key checked (a UserError names a wrong one)."""
        shapes = {name: typed(StepShape, shape, f"workload.shapes.{name}")
                  for name, shape in spec.pop("shapes").items()}
        check_settings(cls, spec, "workload")
        workload = cls(shapes=shapes, **spec)
        if not workload.threads or any(not isinstance(t, int) or t < 1 for t in workload.threads):
            raise UserError(f"workload.threads: give thread counts >= 1, got {workload.threads!r}")
        return workload


def build_chunks(shape: StepShape, context: int, blocks: BlockManager, vocab: int,
                 seed: int) -> list[ScheduledChunk]:
    """The scheduled chunks of one step of `shape`, their block tables allocated by `blocks` (embedding chunks keep
    no KV: the runner gives them scratch blocks)."""
    rng, chunks = random.Random(seed), []

    def add(i: int, kind: str, n_prompt: int, computed: int, n: int, decode: bool = False, **params) -> None:
        prompt = [rng.randrange(vocab) for _ in range(n_prompt)]
        output = [rng.randrange(vocab)] if decode else []  # a decode runs its last sampled token
        s = Sequence(f"{kind}{i}", kind, prompt, RequestTimings(0.0), i, output_ids=output, num_computed=computed,
                     status=Status.RUNNING, **params)
        if kind == "generate" and not blocks.allocate(s, n):
            raise UserError(f"the shape needs more KV blocks than the pool's {blocks.num_blocks}: lower its "
                             "decodes or context")
        chunks.append(ScheduledChunk(s, n))

    context = context if shape.context is None else shape.context
    for i in range(shape.decodes):
        add(i, "generate", context, context, 1, decode=True, sampling=SamplingParams())
    if shape.prefill:
        add(shape.decodes, "generate", shape.prefill_context + shape.prefill, shape.prefill_context, shape.prefill,
            sampling=SamplingParams())
    for i in range(shape.embeds):
        add(i, "embed", shape.embed_tokens, 0, shape.embed_tokens, pooling=PoolingParams(model="backbone"))
    return chunks


def median_ms(fn: Callable[[], object], warmup: int, repeats: int, device: torch.device) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def engine_step(runner: ModelRunner, chunks: list[ScheduledChunk]) -> Callable[[], list[int]]:
    """One step as the engine runs it: forward, then every sampling row sampled at once."""
    params = [c.seq.sampling for c in chunks if c.seq.kind == "generate"]

    def step() -> list[int]:
        logits = runner.execute(chunks).logits
        return sample_batch(logits, params, [None] * len(params)) if logits is not None else []

    return step


def hf_forward(model, shape: StepShape, vocab: int, device: torch.device) -> Callable[[], object]:
    ids = torch.randint(vocab, (1, shape.num_tokens), generator=torch.Generator().manual_seed(0)).to(device)
    logit_rows = max(1, shape.decodes + (1 if shape.prefill else 0))  # the rows a step samples: decodes and prefill

    @torch.inference_mode()
    def forward():
        return model(input_ids=ids, use_cache=False, logits_to_keep=logit_rows)

    return forward


def hf_cached_forward(model, shape: StepShape, context: int, vocab: int,
                      device: torch.device) -> Callable[[], None]:
    """The shape's rows through transformers, each group's context already in a `DynamicCache` (cropped back after
    every call, so each call does the same work)."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(0)

    def ids(rows: int, n: int) -> torch.Tensor:
        return torch.randint(vocab, (rows, n), generator=gen).to(device)

    @torch.inference_mode()
    def filled(rows: int, n: int) -> DynamicCache:
        cache = DynamicCache(config=model.config)
        if n:
            model(input_ids=ids(rows, n), past_key_values=cache, use_cache=True, logits_to_keep=1)
        return cache

    context = context if shape.context is None else shape.context
    groups = []  # (input ids, cache or None)
    if shape.decodes:
        groups.append((ids(shape.decodes, 1), filled(shape.decodes, context)))
    if shape.prefill:
        groups.append((ids(1, shape.prefill), filled(1, shape.prefill_context)))
    if shape.embeds:
        groups.append((ids(shape.embeds, shape.embed_tokens), None))

    @torch.inference_mode()
    def forward() -> None:
        for input_ids, cache in groups:
            model(input_ids=input_ids, past_key_values=cache, use_cache=cache is not None, logits_to_keep=1)
            if cache is not None:
                cache.crop(-input_ids.shape[1])  # back to the context alone

    return forward


def attention_share(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median over `repeats` calls of `fn` of the time inside the attention function over the call's time."""
    from transformers import AttentionInterface

    inner, spent = hook.paged_attention, [0.0]

    def timed(*args, **kwargs):
        _sync(device)
        start = time.perf_counter()
        out = inner(*args, **kwargs)
        _sync(device)
        spent[0] += time.perf_counter() - start
        return out

    shares = []
    AttentionInterface.register(hook.ATTN_IMPLEMENTATION, timed)
    try:
        for _ in range(max(1, repeats)):
            spent[0], start = 0.0, time.perf_counter()
            fn()
            _sync(device)
            shares.append(spent[0] / (time.perf_counter() - start))
    finally:
        hook.register()
    return statistics.median(shares)


def host_ms(fn: Callable[[], object], model: torch.nn.Module, repeats: int, device: torch.device) -> float:
    """Median over `repeats` calls of `fn` (one engine step) of its time outside `model`'s forward: packing the step,
    planning its attention, moving its integers, sampling."""
    inside, marks = [0.0], []
    hooks = [model.register_forward_pre_hook(lambda *_: _sync(device) or marks.append(time.perf_counter())),
             model.register_forward_hook(lambda *_: _sync(device) or inside.__setitem__(
                 0, inside[0] + time.perf_counter() - marks.pop()))]
    outside = []
    try:
        for _ in range(max(1, repeats)):
            inside[0], start = 0.0, time.perf_counter()
            fn()
            _sync(device)
            outside.append(time.perf_counter() - start - inside[0])
    finally:
        for hook in hooks:
            hook.remove()
    return statistics.median(outside) * 1e3


def profile_ms(fn: Callable[[], object], repeats: int, top: int = 5) -> dict[str, float]:
    """The `top` operators by self CPU time over `repeats` calls of `fn` (already warm), in ms per call."""
    from torch.profiler import ProfilerActivity, profile

    calls = max(1, repeats)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {e.key: round(e.self_cpu_time_total / 1e3 / calls, 3) for e in ops}


READ_BUFFER_BYTES = 1 << 30  # the read-bandwidth probe's buffer at most (beside a GPU's KV pool it must fit)


def read_seconds(num_bytes: int, warmup: int, repeats: int, device: torch.device) -> float:
    """Time to read `num_bytes` once, at the bandwidth of a sum over a buffer that size (at most 1 GiB)."""
    size = min(num_bytes, READ_BUFFER_BYTES)
    buffer = torch.ones(size // 4, dtype=torch.float32, device=device)
    return median_ms(buffer.sum, warmup, max(repeats, 5), device) / 1e3 * num_bytes / size


def run_steps(config: EngineConfig, workload: StepsWorkload) -> dict:
    config = replace(config, embedder=None)
    runner = ModelRunner(config)
    hf_model, _ = load_generator(config.generator, runner.dtype, str(runner.device))
    vocab = runner.model.config.get_text_config().vocab_size
    nbytes = sum(p.numel() * p.element_size() for p in runner.model.parameters())
    steps, bandwidth, before = {name: {} for name in workload.shapes}, {}, torch.get_num_threads()

    def ms(fn: Callable[[], object]) -> float:
        return round(median_ms(fn, workload.warmup, workload.repeats, runner.device), 3)

    try:
        for threads in workload.threads:
            torch.set_num_threads(threads)
            runner.num_threads = threads  # the runner keeps its thread count at every step
            read_s = read_seconds(nbytes, workload.warmup, workload.repeats, runner.device)
            bandwidth[str(threads)] = round(nbytes / read_s / 1e9, 2)
            for name, shape in workload.shapes.items():
                blocks = BlockManager(runner.num_kv_blocks, config.block_size, enable_prefix_caching=False)
                chunks = build_chunks(shape, workload.context, blocks, vocab, workload.seed)
                step = engine_step(runner, chunks)
                result = steps[name][str(threads)] = {
                    "engine_ms": ms(step), "hf_ms": ms(hf_forward(hf_model, shape, vocab, runner.device)),
                    "hf_cached_ms": ms(hf_cached_forward(hf_model, shape, workload.context, vocab, runner.device)),
                    "attention_share": round(attention_share(step, workload.repeats, runner.device), 3),
                    "host_ms": round(host_ms(step, runner.model, workload.repeats, runner.device), 3),
                    "floor_ms": round(read_s * 1e3, 3)}
                if workload.profile:
                    result["profile"] = profile_ms(step, workload.repeats)
    finally:
        torch.set_num_threads(before)
    return {"workload": "steps", "steps": steps, "tokens": {n: s.num_tokens for n, s in workload.shapes.items()},
            "weight_bytes": nbytes, "read_gb_s": bandwidth, "attention_backend": runner.attention.name,
            "config": {"generator": config.generator, "dtype": str(runner.dtype), "device": str(runner.device),
                       "native_bf16": native_bf16(runner.device),
                       "context": workload.context, "warmup": workload.warmup, "repeats": workload.repeats}}


def format_steps_table(bench: dict) -> str:
    header = ("shape|threads|tokens|engine ms|host ms|hf ms|hf cached ms|floor ms|engine/hf|engine/hf cached|"
              "attention share|engine tok/s").split("|")
    return markdown_table(header, [
        [name, threads, bench["tokens"][name], f"{r['engine_ms']:.1f}", f"{r['host_ms']:.2f}", f"{r['hf_ms']:.1f}",
         f"{r['hf_cached_ms']:.1f}", f"{r['floor_ms']:.1f}", f"{r['engine_ms'] / r['hf_ms']:.2f}",
         f"{r['engine_ms'] / r['hf_cached_ms']:.2f}", f"{r['attention_share']:.0%}",
         f"{bench['tokens'][name] / r['engine_ms'] * 1e3:,.0f}"]
        for name, by_threads in bench["steps"].items() for threads, r in by_threads.items()])


def steps_bench(cfg) -> dict:
    """bench.json's dictionary for the Hydra config (the CLI writes it and prints `format_steps_table`)."""
    from orthrus_rag.stack import StackPlan

    workload = StepsWorkload.from_dict(plain(cfg.workload))
    return run_steps(StackPlan.from_config(cfg, pipelines={}).engine, workload)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
