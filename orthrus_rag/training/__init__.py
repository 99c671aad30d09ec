"""Training an embedding adapter for the shared backbone: (query, passage) pairs, pooled embeddings, and a
contrastive LoRA training loop whose output the engine loads as `runtime.embedding_adapter`."""
from orthrus_rag.training.pairs import Pair, PairSource, corpus_pairs, load_pairs, question_pairs
from orthrus_rag.training.pooled import pooled_embeddings
from orthrus_rag.training.trainer import TrainSettings, TrainResult, train_adapter

__all__ = ["Pair", "PairSource", "TrainResult", "TrainSettings", "corpus_pairs", "load_pairs", "pooled_embeddings",
           "question_pairs", "train_adapter"]
