"""Runs one step of the generator: packs the scheduled chunks into one flat token row and does ONE forward pass."""
from __future__ import annotations

import torch

from orthrus_rag.engine import attention
from orthrus_rag.engine.attention import AttentionMetadata, DecodeGroup, Segment
from orthrus_rag.engine.batch import ModelOutput, ScheduledChunk
from orthrus_rag.engine.block_manager import BlockManager
from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.kv_cache import PagedKVCache
from orthrus_rag.engine.lora import AdapterRows, attach_embedding_adapter
from orthrus_rag.models import load_generator, resolve_device, resolve_dtype


class ModelRunner:
    def __init__(self, config: EngineConfig):
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype)
        self.model, self.tokenizer = load_generator(config.generator, self.dtype, str(self.device), config.load_format)
        self.model.set_attn_implementation(attention.register())
        self.adapter: AdapterRows | None = None
        if config.embedding_adapter:
            self.adapter = attach_embedding_adapter(self.model, config.embedding_adapter)
        text_config = self.model.config.get_text_config()
        self.max_model_len = config.max_model_len or text_config.max_position_embeddings
        self.hidden_size = text_config.hidden_size
        self.block_size = config.block_size
        heads = text_config.num_attention_heads
        head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // heads
        kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
        self.cache = PagedKVCache(text_config.num_hidden_layers, config.num_kv_blocks * config.block_size,
                                  kv_heads, head_dim, self.dtype, self.device)

    @torch.inference_mode()
    def execute(self, chunks: list[ScheduledChunk], blocks: BlockManager) -> ModelOutput:
        ids, positions, segments, write_rows, write_slots = [], [], [], [], []
        logit_rows, logit_ids, pooled, embed_start, decodes = [], [], [], None, []
        for chunk in chunks:
            seq, n, start, ctx = chunk.seq, chunk.num_tokens, len(ids), chunk.seq.num_computed
            if seq.kind == "embed" and embed_start is None:
                embed_start = start
            ids.extend(seq.token_ids[ctx:ctx + n])
            positions.extend(range(ctx, ctx + n))
            slots = self._slots(seq, ctx + n) if seq.block_table else None
            if slots is not None:
                write_rows.extend(range(start, start + n))
                write_slots.append(slots[ctx:])
            if n == 1 and ctx and slots is not None:
                decodes.append((start, slots))
            else:
                segments.append(Segment(start, start + n, ctx, slots if slots is not None and ctx else None))
            if seq.kind == "embed":
                pooled.append((seq.request_id, start, start + n))
            elif chunk.completes:
                logit_rows.append(start + n - 1)
                logit_ids.append(seq.request_id)
        meta = AttentionMetadata(self.cache, segments, self._long(write_rows),
                                 torch.cat(write_slots) if write_slots else self._long([]), self._group(decodes))
        if self.adapter is not None:
            self.adapter.start = embed_start
        out = self.model(input_ids=self._long(ids)[None], position_ids=self._long(positions)[None], use_cache=False,
                         logits_to_keep=self._long(logit_rows) if logit_rows else 1,
                         output_hidden_states=bool(pooled), orthrus_meta=meta)
        result = ModelOutput()
        if logit_rows:
            result.logits = dict(zip(logit_ids, out.logits[0]))
        if pooled:
            hidden = out.hidden_states[-1][0]
            result.hidden = {rid: hidden[s:e] for rid, s, e in pooled}
        return result

    def _group(self, decodes: list[tuple[int, torch.Tensor]]) -> DecodeGroup | None:
        """Decode rows padded to the longest context (padding reads slot 0 and is masked out)."""
        if not decodes:
            return None
        width = max(slots.numel() for _, slots in decodes)
        padded = torch.zeros(len(decodes), width, dtype=torch.long, device=self.device)
        for i, (_, slots) in enumerate(decodes):
            padded[i, :slots.numel()] = slots
        lengths = self._long([slots.numel() for _, slots in decodes])
        return DecodeGroup(self._long([row for row, _ in decodes]), padded.flatten(), lengths)

    def _slots(self, seq, length: int) -> torch.Tensor:
        """Flat cache slots of positions 0 .. length-1 of `seq`."""
        table = self._long(seq.block_table)
        offsets = torch.arange(self.block_size, device=self.device)
        return (table[:, None] * self.block_size + offsets).flatten()[:length]

    def _long(self, values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)
