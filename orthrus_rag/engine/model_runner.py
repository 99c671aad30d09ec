"""Runs one step of the generator: packs the scheduled chunks into one flat token row and does ONE forward pass."""
from __future__ import annotations

import torch

from orthrus_rag.engine import attention, vllm_cpu
from orthrus_rag.engine.batch import ModelOutput, ScheduledChunk
from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.kv_cache import PagedKVCache, bytes_per_block, pool_size
from orthrus_rag.engine.lora import attach_embedding_adapter
from orthrus_rag.engine.packing import pack_host, to_device
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
        blocked = self.attention_backend == attention.VLLM_CPU
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
