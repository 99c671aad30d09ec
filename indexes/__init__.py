"""Corpora and FAISS indexes: load, build, save, load back, search."""
from indexes.corpus import CorpusFormatError, corpus_fingerprint, load_corpus
from indexes.faiss_index import DenseIndex, IndexMismatchError

__all__ = ["CorpusFormatError", "DenseIndex", "IndexMismatchError", "corpus_fingerprint", "load_corpus"]
