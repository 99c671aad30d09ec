"""Corpora and FAISS indexes: load, build, save, load back, search."""
from orthrus_rag.indexes.build import embed_passages, engine_embedder, load_or_build
from orthrus_rag.indexes.corpus import CorpusFormatError, corpus_fingerprint, load_corpus
from orthrus_rag.indexes.faiss_index import DenseIndex, IndexMismatchError
from orthrus_rag.indexes.manifest import IndexManifest
from orthrus_rag.indexes.placement import TorchFlatSearch

__all__ = ["CorpusFormatError", "DenseIndex", "IndexManifest", "IndexMismatchError", "corpus_fingerprint",
           "embed_passages", "engine_embedder", "load_corpus", "load_or_build", "TorchFlatSearch"]
