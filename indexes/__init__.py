"""Corpora and FAISS indexes: load, build, save, load back, search."""
from .build import embed_passages, engine_embedder, load_or_build
from .corpus import CorpusFormatError, corpus_fingerprint, load_corpus
from .faiss_index import DenseIndex, IndexMismatchError
from .manifest import IndexManifest
from .placement import TorchFlatSearch

__all__ = ["CorpusFormatError", "DenseIndex", "IndexManifest", "IndexMismatchError", "corpus_fingerprint",
           "embed_passages", "engine_embedder", "load_corpus", "load_or_build", "TorchFlatSearch"]
