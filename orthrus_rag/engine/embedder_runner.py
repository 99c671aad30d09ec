"""The co-located embedder: a sentence-transformers model run in the same engine step as the generator. A
bidirectional encoder cannot be chunked exactly, so each input runs whole; one longer than the encoder's maximum
length is split into windows that fit it with its special tokens ([CLS] ... [SEP]), whose embeddings are averaged
by token count, then normalised (an approximation; docs/engine.md, "Embeddings").
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from sentence_transformers.models import Normalize

from orthrus_rag.engine.sequence import Sequence
from orthrus_rag.models import load_embedder


class EmbedderRunner:
    def __init__(self, name: str, dtype: torch.dtype, device: torch.device, load_format: str = "auto"):
        self.model = load_embedder(name, dtype, str(device), load_format)
        self.tokenizer = self.model.tokenizer
        self.vocab_size = min(self.tokenizer.vocab_size, self.model[0].auto_model.get_input_embeddings().num_embeddings)
        self.max_len = int(self.model.max_seq_length or self.tokenizer.model_max_length)
        self.dim = self.model.get_embedding_dimension()
        self.device = device
        self.prefix, self.suffix = _special_tokens(self.tokenizer)

    def tokenize(self, text: str) -> list[int]:
        """Token ids without special tokens; windows add them."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @torch.inference_mode()
    def embed(self, seqs: list[Sequence]) -> dict[str, torch.Tensor]:
        windows = [[self.prefix + window + self.suffix for window in self._windows(seq.prompt_ids)] for seq in seqs]
        vectors = self._forward([w for seq_windows in windows for w in seq_windows]).split([len(w) for w in windows])
        results: dict[str, torch.Tensor] = {}
        for seq, seq_windows, seq_vectors in zip(seqs, windows, vectors):
            weights = torch.tensor([len(w) for w in seq_windows], dtype=torch.float32, device=seq_vectors.device)
            vector = (seq_vectors * weights[:, None]).sum(0) / weights.sum()
            results[seq.request_id] = F.normalize(vector, dim=-1) if seq.pooling.normalize else vector
        return results

    def _windows(self, ids: list[int]) -> list[list[int]]:
        size = max(1, self.max_len - len(self.prefix) - len(self.suffix))
        return [ids[i:i + size] for i in range(0, max(len(ids), 1), size)]

    def _forward(self, windows: list[list[int]]) -> torch.Tensor:
        """Sentence embeddings (before any Normalize module) of padded windows, in float32."""
        length = max(len(w) for w in windows)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.tensor([w + [pad] * (length - len(w)) for w in windows], device=self.device)
        mask = torch.tensor([[1] * len(w) + [0] * (length - len(w)) for w in windows], device=self.device)
        features = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        for module in self.model:
            if not isinstance(module, Normalize):
                features = module(features)
        return features["sentence_embedding"].float()


def _special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text (e.g. [CLS] and [SEP])."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    start = next(i for i in range(len(full)) if full[i:i + len(plain)] == plain)
    return full[:start], full[start + len(plain):]
