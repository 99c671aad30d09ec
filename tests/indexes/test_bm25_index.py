"""BM25Index against bm25s used directly, and against the Lucene BM25 formula computed by hand."""
import math

import bm25s
import pytest

from orthrus_rag.indexes.bm25_index import BM25Index, BM25Params, load_or_build_bm25, passage_text
from orthrus_rag.rag.types import Passage

TOY = [Passage("a", "Lothair II", "Lothair II was a king of Lotharingia. His mother was Ermengarde of Tours."),
       Passage("b", "Ermengarde of Tours", "Ermengarde of Tours died on 20 March 851, queen of the Franks."),
       Passage("c", "Waldrada", "Waldrada was the mistress and later wife of Lothair II."),
       Passage("d", "Tours", "Tours is a city in France on the Loire."),
       Passage("e", "Paris", "Paris is the capital of France."),
       Passage("f", "Loire", "The Loire is the longest river in France, flowing past Tours and Orleans.")]
QUERIES = ["When did Lothair II's mother die?", "city on the Loire in France", "queen of the Franks", "Paris"]


def library_scores(passages, query, params=BM25Params()):
    """bm25s on its own: its tokenizer (English stop words), its index, its top-k retrieval over every passage."""
    retriever = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    retriever.index(bm25s.tokenize([passage_text(p) for p in passages], stopwords="en", show_progress=False),
                    show_progress=False)
    docs, scores = retriever.retrieve(bm25s.tokenize([query], stopwords="en", show_progress=False),
                                      k=len(passages), show_progress=False)
    return {passages[i].id: float(s) for i, s in zip(docs[0], scores[0]) if s > 0}


@pytest.mark.parametrize("query", QUERIES)
def test_scores_equal_the_library(query):
    found = BM25Index.build(TOY).search_text(query, k=len(TOY))
    expected = library_scores(TOY, query)
    assert expected and {p.id: p.score for p in found} == pytest.approx(expected, rel=1e-6)
    assert [p.score for p in found] == sorted((p.score for p in found), reverse=True)


def test_scores_equal_the_lucene_formula_by_hand():
    k1, b = 1.5, 0.75
    docs = [["tours", "city", "loire"], ["paris", "city"], ["loire", "loire", "river", "tours"]]
    passages = [Passage(str(i), "", " ".join(words)) for i, words in enumerate(docs)]
    average = sum(map(len, docs)) / len(docs)

    def by_hand(query_terms, doc):
        total = 0.0
        for term in query_terms:
            df = sum(term in d for d in docs)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            tf = doc.count(term)
            total += idf * tf / (tf + k1 * (1 - b + b * len(doc) / average))
        return total

    scores = BM25Index.build(passages, BM25Params(k1, b, "lucene")).scores("loire city")
    assert scores == pytest.approx([by_hand(["loire", "city"], d) for d in docs], rel=1e-6)


def test_ties_in_corpus_order_and_no_shared_term_finds_nothing():
    twins = [Passage("x", "", "red apple"), Passage("y", "", "green pear"), Passage("z", "", "red apple")]
    index = BM25Index.build(twins)
    assert [p.id for p in index.search_text("apple", 3)] == ["x", "z"]
    assert index.search_text("banana the of", 3) == []
    assert [p.id for p in index.search_text("red apple", 1)] == ["x"]
    assert [p.id for p in index.search_text("apple pear", 3)] == ["y", "x", "z"]  # pear is rarer: higher idf


def test_load_or_build_caches_and_rebuilds_for_another_corpus(tmp_path, monkeypatch):
    builds = []
    original = BM25Index.build.__func__
    monkeypatch.setattr(BM25Index, "build", classmethod(lambda cls, *a, **kw: builds.append(1) or original(cls, *a, **kw)))
    first = load_or_build_bm25(tmp_path, TOY)
    second = load_or_build_bm25(tmp_path, TOY)
    assert len(builds) == 1
    for query in QUERIES:
        assert second.search_text(query, 4) == first.search_text(query, 4)
    load_or_build_bm25(tmp_path, TOY[:4])
    load_or_build_bm25(tmp_path, TOY[:4], BM25Params(k1=1.2))
    assert len(builds) == 3


def test_load_refuses_another_corpus(tmp_path):
    from orthrus_rag.indexes.faiss_index import IndexMismatchError

    BM25Index.build(TOY).save(tmp_path)
    assert BM25Index.load(tmp_path, TOY).search_text("Paris", 1)[0].id == "e"
    for other in (TOY[::-1], TOY[:4]):
        with pytest.raises(IndexMismatchError, match="another corpus"):
            BM25Index.load(tmp_path, other)


def test_empty_corpus_is_refused():
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Index.build([])
