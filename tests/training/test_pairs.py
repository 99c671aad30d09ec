import json

import pytest

from orthrus_rag.rag.types import Passage
from orthrus_rag.training.pairs import (SLOT, Pair, PairSource, fill, load_pairs, question_templates, split_pairs,
                                        templated_title_pairs)

QUESTIONS = [
    {"question": "Which film came out first, 3 Dots or Dying God?", "gold_titles": ["3 Dots", "Dying God"],
     "corpus_ids": ["a", "b"]},
    {"question": "When did Lothair Ii's mother die?", "gold_titles": ["Lothair II", "Ermengarde of Tours"],
     "corpus_ids": ["c", "d"]},
    {"question": "Which film came out first, Alpha or Beta?", "gold_titles": ["Alpha", "Beta"],
     "corpus_ids": ["e", "f"]},
    {"question": "Who is the father of the director?", "gold_titles": ["Nobody Named"], "corpus_ids": ["a"]},
    {"question": "Are A1, B1 and C1 alike?", "gold_titles": ["A1", "B1", "C1"], "corpus_ids": ["a"]},
]
TITLES = {"a": "3 Dots", "b": "Dying God", "c": "Lothair II", "d": "Ermengarde of Tours", "e": "Alpha", "f": "Beta"}


@pytest.fixture
def files(tmp_path):
    questions, corpus = tmp_path / "questions.jsonl", tmp_path / "corpus.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    corpus.write_text("".join(json.dumps({"id": i, "title": t, "text": f"{t} is a thing."}) + "\n"
                              for i, t in TITLES.items()))
    return questions, corpus


def test_templates_replace_the_gold_titles_a_question_names(files):
    templates = question_templates(files[0], lines=len(QUESTIONS))
    # case-insensitive (2Wiki title-cases names); the repeated form once; no title named or three named: none
    assert templates == [f"Which film came out first, {SLOT} or {SLOT}?", f"When did {SLOT}'s mother die?"]
    assert question_templates(files[0], lines=1) == templates[:1]


def test_fill_title_cases_the_names_as_the_questions_do():
    assert fill(f"When did {SLOT}'s mother die?", ["Lothair II"]) == "When did Lothair Ii's mother die?"
    assert fill(f"{SLOT} or {SLOT}?", ["God's gift", "x (film)"]) == "God'S Gift or X (Film)?"


def test_a_two_slot_form_pairs_its_query_with_both_passages():
    passages = {i: Passage(text="t", title=t, id=i) for i, t in TITLES.items()}
    pairs = templated_title_pairs(passages, [f"{SLOT} or {SLOT}?"], seed=0)
    assert len(pairs) == 2 * len(passages)
    for first, second in zip(pairs[::2], pairs[1::2]):
        assert first.query == second.query and first.passage_id != second.passage_id
        assert first.query == fill(f"{SLOT} or {SLOT}?", [TITLES[first.passage_id], TITLES[second.passage_id]])
    # every passage is named by the query made for it
    assert {p.passage_id for p in pairs} == set(passages)
    assert pairs == templated_title_pairs(passages, [f"{SLOT} or {SLOT}?"], seed=0)


def test_one_slot_forms_give_one_pair_a_passage():
    passages = {i: Passage(text="t", title=t, id=i) for i, t in TITLES.items()}
    pairs = templated_title_pairs(passages, [f"Who is {SLOT}?"], seed=3)
    assert [(p.query, p.passage_id, p.source) for p in pairs] == [
        (f"Who is {t.title()}?", i, "template") for i, t in TITLES.items()]


def test_load_pairs_with_title_templates(files):
    questions, corpus = files
    source = PairSource(corpus=str(corpus), questions=str(questions), question_lines=2, title_templates=True)
    pairs = load_pairs(source, seed=1)
    kinds = [p.source for p in pairs]
    assert kinds.count("question") == 4 and kinds.count("template") >= len(TITLES)
    assert load_pairs(source, seed=1) == pairs
    bare = load_pairs(PairSource(corpus=str(corpus)))
    assert [p.query for p in bare] == list(TITLES.values())


def test_title_templates_need_questions_naming_their_titles(files, tmp_path):
    questions, corpus = files
    bare = load_pairs(PairSource(corpus=str(corpus), title_templates=True))  # no questions: bare titles
    assert [p.query for p in bare] == list(TITLES.values())
    unnamed = tmp_path / "unnamed.jsonl"
    unnamed.write_text(json.dumps({"question": "Who?", "gold_titles": ["Alpha"], "corpus_ids": ["e"]}) + "\n")
    with pytest.raises(ValueError, match="title_templates: no question names one of its gold_titles"):
        load_pairs(PairSource(corpus=str(corpus), questions=str(unnamed), question_lines=1, title_templates=True))


def test_split_holds_out_whole_queries_and_trains_on_the_rest_with_repeats():
    titles = [Pair(f"title {i}", f"passage {i}", f"p{i}", "title") for i in range(30)]
    comparisons = [Pair(f"A{i} or B{i}?", f"passage {j}", f"p{j}", "template") for i in range(5) for j in (i, i + 10)]
    questions = [Pair(f"question {i}?", f"passage {i}", f"p{i}", "question") for i in range(8)] * 3
    pairs = titles + comparisons + questions
    train, held = split_pairs(pairs, held_out=12, seed=0)
    held_queries = {p.query for p in held}
    assert len(held) == len(set(held)) >= 12
    assert not held_queries & {p.query for p in train}  # no held-out pair has a copy, or its query, in training
    assert train == [p for p in pairs if p.query not in held_queries]  # repeats kept, in order
    assert set(train) | set(held) == set(pairs)
    assert split_pairs(pairs, held_out=12, seed=0) == (train, held)
    assert split_pairs(pairs, held_out=0, seed=0) == (pairs, [])
