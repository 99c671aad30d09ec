"""Corpora and FAISS indexes: load, build, save, load back, search."""
from indexes.build import embed_passages, engine_embedder, load_or_build
from indexes.corpus import CorpusFormatError, corpus_fingerprint, load_corpus
from indexes.faiss_index import DenseIndex, IndexMismatchError
from indexes.manifest import IndexManifest
from indexes.placement import TorchFlatSearch

__all__ = ["CorpusFormatError", "DenseIndex", "IndexManifest", "IndexMismatchError", "corpus_fingerprint",
           "embed_passages", "engine_embedder", "load_corpus", "load_or_build", "TorchFlatSearch"]
