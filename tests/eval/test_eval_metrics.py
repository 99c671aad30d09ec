import pytest

from eval.metrics import (QuestionScores, acc, aggregate, all_gold, exact_match, f1, normalize_answer,
                          passage_recall, score_answer)
from orthrus_rag.rag.types import Passage


@pytest.mark.parametrize("raw, expected", [
    ("The  Eiffel Tower!", "eiffel tower"),
    ("an Apple a day", "apple day"),
    ("Theatre, anthem; a-b", "theatre anthem ab"),
    ("  Mixed\tCASE\n", "mixed case"),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_exact_match_ignores_case_articles_punctuation():
    assert exact_match("The Velm River.", ["velm river"]) == 1.0
    assert exact_match("Velm River delta", ["velm river"]) == 0.0


def test_f1_partial_overlap_by_hand():
    # pred tokens: blue river flows north (4); gold: blue river (2); common 2 -> P=1/2, R=1, F1=2/3
    assert f1("The Blue River flows north", ["Blue River"]) == pytest.approx(2 / 3)
    # pred: john smith jr (3); gold: smith john (2); common 2 -> P=2/3, R=1, F1=0.8
    assert f1("John Smith Jr.", ["Smith, John"]) == pytest.approx(0.8)
    assert f1("paris paris", ["paris"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert f1("London", ["Paris"]) == 0.0


def test_acc_is_containment_on_word_boundaries():
    assert acc("It was founded in 1832 by Ola.", ["1832"]) == 1.0
    assert acc("It was founded in 18321.", ["1832"]) == 0.0
    assert acc("Velm", ["Velm River"]) == 0.0


def test_yes_no_answers_only_match_exactly():
    assert [exact_match("Yes.", ["yes"]), f1("Yes.", ["yes"]), acc("Yes.", ["yes"])] == [1.0, 1.0, 1.0]
    assert [exact_match("yes, both are", ["yes"]), f1("yes, both are", ["yes"]),
            acc("yes, both are", ["yes"])] == [0.0, 0.0, 0.0]
    assert [f1("no", ["yes"]), acc("no", ["yes"])] == [0.0, 0.0]
    assert f1("no", ["no way"]) == 0.0  # a yes/no prediction against another answer


def test_max_over_aliases():
    assert exact_match("Kestrel Works", ["Kestrel Ironworks", "Kestrel Works"]) == 1.0
    assert f1("Kestrel", ["Bram", "Kestrel Works"]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no gold answers"):
        exact_match("x", [])


def test_passage_recall_and_all_gold():
    passages = [Passage("1", "Ana Tovel", ""), Passage("2", "Velm River", ""), Passage("3", "Other", "")]
    assert passage_recall(["Ana Tovel", "Brisk Hollow"], passages) == 0.5
    assert all_gold(["Ana Tovel", "Brisk Hollow"], passages) == 0.0
    assert all_gold(["Ana Tovel", "Velm River"], passages) == 1.0
    assert passage_recall(["Ana Tovel", "Ana Tovel"], passages[:1]) == 1.0
    assert passage_recall([], passages) is None


def test_score_answer_and_aggregate():
    passages = [Passage("1", "A", "")]
    first = score_answer("Velm River", ["Velm River"], ["A", "B"], passages)
    assert first == QuestionScores(em=1.0, f1=1.0, acc=1.0, recall=0.5, all_gold=0.0)
    second = score_answer("nothing", ["Velm River"], [], passages)
    totals = aggregate([first, second])
    assert totals == {"em": 0.5, "f1": 0.5, "acc": 0.5, "recall": 0.5, "all_gold": 0.0}
    with pytest.raises(ValueError, match="no scores"):
        aggregate([])
