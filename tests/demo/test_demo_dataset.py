import json
from collections import Counter

import pytest

from orthrus_rag.eval.experiment.datasets import load_questions
from orthrus_rag.eval.experiment.metrics import YES_NO
from orthrus_rag.indexes.corpus import load_corpus
from orthrus_rag.demo import demo_corpus_path, demo_questions_path


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(demo_corpus_path())


@pytest.fixture(scope="module")
def questions():
    return load_questions(demo_questions_path(), "all")


def test_sizes_and_unique_keys(corpus, questions):
    assert 140 <= len(corpus) <= 160 and len(questions) == 30
    assert len({p.id for p in corpus}) == len(corpus)
    assert len({p.title for p in corpus}) == len(corpus)
    assert len({q.id for q in questions}) == 30


def test_splits(questions):
    dev, test = load_questions(demo_questions_path(), "dev"), load_questions(demo_questions_path(), "test")
    assert (len(dev), len(test)) == (10, 20)
    assert [q.id for q in dev + test] == [q.id for q in questions]


def test_question_kinds(questions):
    kinds = Counter(q.type for q in questions)
    assert set(kinds) == {"compositional", "bridge", "inference", "comparison"}
    assert 3 <= sum(q.answer in YES_NO for q in questions) <= 8


def test_gold_titles_exist_and_answers_are_in_gold_passages(corpus, questions):
    by_title = {p.title: p for p in corpus}
    for q in questions:
        assert len(q.gold_titles) == 2, q.id
        missing = [t for t in q.gold_titles if t not in by_title]
        assert not missing, f"{q.id}: gold titles {missing} not in the corpus"
        if q.answer not in YES_NO:
            texts = [by_title[t].text for t in q.gold_titles]
            assert any(q.answer in text for text in texts), f"{q.id}: {q.answer!r} not in its gold passages"


def test_corpus_ids_point_at_gold_passages(corpus):
    by_id = {p.id: p.title for p in corpus}
    for line in demo_questions_path().read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert [by_id[i] for i in row["corpus_ids"]] == row["gold_titles"], row["id"]
