"""Engine counters: steps, tokens and busy time by kind, preemptions, prefix-cache hits, queue and cache use."""
from __future__ import annotations

from dataclasses import dataclass, field

from orthrus_rag.engine.batch import SchedulerOutput


@dataclass
class EngineStats:
    steps: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: {"decode": 0, "prefill": 0, "embed": 0})
    generator_s: float = 0.0
    embedder_s: float = 0.0
    preemptions: int = 0
    mixed_steps: int = 0  # steps holding both generation and embedding work

    def record_step(self, sched: SchedulerOutput, gen_s: float, emb_s: float) -> dict[str, int]:
        """Count one step; returns its tokens by kind."""
        self.steps += 1
        counts = sched.tokens_by_kind()
        for kind, n in counts.items():
            self.tokens[kind] += n
        self.generator_s += gen_s
        self.embedder_s += emb_s
        self.preemptions += len(sched.preempted)
        self.mixed_steps += bool(counts["embed"]) and bool(counts["decode"] + counts["prefill"])
        return counts

    def snapshot(self, engine) -> dict:
        blocks = engine.blocks
        return {
            "steps": self.steps,
            "mixed_steps": self.mixed_steps,
            "tokens": dict(self.tokens),
            "generator_s": round(self.generator_s, 4),
            "embedder_s": round(self.embedder_s, 4),
            "preemptions": self.preemptions,
            "prefix_cache_hit_tokens": blocks.hits,
            "waiting": {k: len(q) for k, q in engine.scheduler.waiting.items()},
            "running": len(engine.scheduler.running),
            "kv_blocks_total": blocks.num_blocks,
            "kv_blocks_used": blocks.num_blocks - blocks.num_free,
            "policy": engine.scheduler.policy.name,
            "attention_backend": engine.runner.attention_backend,
            "dtype": str(engine.runner.dtype).removeprefix("torch."),
        }
