"""A BM25 passage index over the `bm25s` library, saved with a manifest that guards against stale indexes.

Each passage is indexed as its title followed by its text. Tokens are lower-cased words of two or more word characters,
English stop words removed, no stemming (bm25s's own tokenizer); scoring is bm25s's, the Lucene variant by default.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np
from bm25s.tokenization import Tokenizer

from orthrus_rag.rag.types import Passage

from .corpus import corpus_fingerprint
from .manifest import check_corpus

logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import: its build notes reach the console
BM25_MANIFEST_FILE = "bm25.json"
STOPWORDS = "en"
new_tokenizer = functools.partial(Tokenizer, stopwords=STOPWORDS, stemmer=None)


@dataclass(frozen=True)
class BM25Params:
    """bm25s's scoring settings: term-frequency saturation `k1`, length normalisation `b`, and the variant."""

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"  # robertson | lucene | atire | bm25l | bm25+ (bm25s's names)


@dataclass
class BM25Manifest:
    """What a saved BM25 index was built from: the corpus, the settings and the library version."""

    params: dict
    corpus_fingerprint: str
    num_passages: int
    stopwords: str = STOPWORDS
    bm25s_version: str = field(default_factory=lambda: bm25s.__version__)

    def save(self, folder: Path) -> None:
        (folder / BM25_MANIFEST_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> BM25Manifest:
        return cls(**json.loads((folder / BM25_MANIFEST_FILE).read_text(encoding="utf-8")))


def passage_text(passage: Passage) -> str:
    """What BM25 indexes for a passage: its title, then its text."""
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


class BM25Index:
    """BM25 scores for a list of passages; row i is passages[i]."""

    def __init__(self, retriever: bm25s.BM25, tokenizer: Tokenizer, passages: Sequence[Passage],
                 manifest: BM25Manifest):
        self.retriever, self.tokenizer = retriever, tokenizer
        self.passages = list(passages)
        self.manifest = manifest

    @classmethod
    def build(cls, passages: Sequence[Passage], params: BM25Params = BM25Params()) -> BM25Index:
        if not passages:
            raise ValueError("cannot build a BM25 index over an empty corpus: check the corpus path")
        tokenizer = new_tokenizer()
        tokens = tokenizer.tokenize([passage_text(p) for p in passages], return_as="tuple", show_progress=False)
        retriever = bm25s.BM25(**asdict(params))
        retriever.index(tokens, show_progress=False)
        manifest = BM25Manifest(asdict(params), corpus_fingerprint(passages), len(passages))
        return cls(retriever, tokenizer, passages, manifest)

    def scores(self, query: str) -> np.ndarray:
        """bm25s's score of every passage for `query` (0 for passages sharing no term with it)."""
        ids = self.tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        return self.retriever.get_scores_from_ids(ids)

    def search_text(self, query: str, k: int) -> list[Passage]:
        """The k best-scoring passages for `query`, best first, `score` filled; ties in corpus order; passages that
        share no term with the query are left out."""
        scores = self.scores(query)
        matching = np.flatnonzero(scores > 0)
        order = matching[np.lexsort((matching, -scores[matching]))][:k]
        return [dataclasses.replace(self.passages[i], score=float(scores[i])) for i in order]

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(folder), show_progress=False)
        self.tokenizer.save_vocab(str(folder))
        self.manifest.save(folder)

    @classmethod
    def load(cls, folder: str | Path, corpus: Sequence[Passage]) -> BM25Index:
        """Read a saved index, refusing it (IndexMismatchError) when it was built over another corpus."""
        folder = Path(folder)
        manifest = BM25Manifest.load(folder)
        check_corpus(folder, manifest.corpus_fingerprint, manifest.num_passages, corpus)
        retriever = bm25s.BM25.load(str(folder), show_progress=False, verbosity=0)
        tokenizer = new_tokenizer()
        tokenizer.load_vocab(str(folder))
        return cls(retriever, tokenizer, corpus, manifest)


def load_or_build_bm25(folder: str | Path, passages: Sequence[Passage],
                       params: BM25Params = BM25Params()) -> BM25Index:
    """The BM25 index cached in `folder` when it matches the corpus and settings; else built and saved there."""
    folder = Path(folder)
    try:
        saved = BM25Manifest.load(folder)
    except (FileNotFoundError, ValueError, TypeError):  # no index there, or not one this version reads
        saved = None
    if saved == BM25Manifest(asdict(params), corpus_fingerprint(passages), len(passages)):
        return BM25Index.load(folder, passages)
    index = BM25Index.build(passages, params)
    index.save(folder)
    return index
