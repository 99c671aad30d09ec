import itertools
import json
import os
import random
import re
import string
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from orthrus_rag.eval.experiment.metrics import (MetricSettings, QuestionScores, acc, acc_substring, aggregate, all_gold, bootstrap_ci,
                          exact_match, extra_results, f1, normalize_answer, passage_recall, score_answer,
                          scores_by_type)
from orthrus_rag.rag.types import Passage
from orthrus_rag.settings import UserError


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
    assert first == QuestionScores(em=1.0, f1=1.0, acc=1.0, acc_substring=1.0, recall=0.5, all_gold=0.0)
    second = score_answer("nothing", ["Velm River"], [], passages)
    totals = aggregate([first, second])
    assert totals == {"em": 0.5, "f1": 0.5, "acc": 0.5, "acc_substring": 0.5, "recall": 0.5, "all_gold": 0.0}
    with pytest.raises(ValueError, match="no scores"):
        aggregate([])


# ---- the official 2WikiMultihopQA scorer, written again from its published rules ------------------------------
def reference_normalize(text: str) -> str:
    """The scorer's rules in its order: lower case, delete ASCII punctuation, replace each whole word a/an/the
    (a maximal run of word characters) by a space, split on whitespace and join with single spaces."""
    lowered = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    runs = ["".join(chars) for _, chars in itertools.groupby(lowered, key=lambda ch: ch.isalnum() or ch == "_")]
    return " ".join("".join(" " if run in {"a", "an", "the"} else run for run in runs).split())


def reference_scores(prediction: str, golds: list[str]) -> tuple[float, float]:
    """(EM, F1) as the scorer's answer task: the best of each over the gold answer and its aliases."""
    best_em, best_f1 = 0.0, 0.0
    for gold in golds:
        p, g = reference_normalize(prediction), reference_normalize(gold)
        best_em = max(best_em, float(p == g))
        special = {"yes", "no", "noanswer"}
        if (p in special or g in special) and p != g:
            continue
        shared = sum(min(p.split().count(w), g.split().count(w)) for w in set(p.split()))
        if shared:
            precision, recall = shared / len(p.split()), shared / len(g.split())
            best_f1 = max(best_f1, 2 * precision * recall / (precision + recall))
    return best_em, best_f1


WORDS = ["the", "a", "an", "The", "A", "An", "THE", "yes", "no", "Yes", "noanswer", "No.", "theatre", "another",
         "Paris", "paris", "John", "Smith", "Jr.", "1832", "18-32", "St.", "Louis", "Ōsaka", "Zürich", "the–end",
         "O'Neil", "rock-and-roll", "(film)", "March", "20", "851", "an_x", "café", "Velm", "River", ",", ";"]


def random_pairs(count: int, seed: int = 7) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)

    def phrase() -> str:
        return rng.choice(["", " ", "\t"]) + " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 5)))

    pairs = []
    for _ in range(count):
        golds = [phrase() for _ in range(rng.randint(1, 3))]
        words = golds[0].split()
        partial = " ".join(rng.sample(words, rng.randint(0, len(words))))  # some of a gold's words, reordered
        prediction = rng.choice([phrase(), golds[0].upper() + "!", "the " + golds[-1], rng.choice(["yes", "no"]),
                                 f"{golds[-1]} {phrase()}", f"{partial} {phrase()}", partial])
        pairs.append((prediction, golds))
    return pairs


def test_reference_normalize_by_hand():
    assert reference_normalize("The  Eiffel Tower!") == "eiffel tower"
    assert reference_normalize("the–end") == "–end"  # an en dash is not ASCII punctuation but ends a word
    assert reference_normalize("an_x") == "anx"


def test_em_and_f1_equal_the_official_scorer_on_400_pairs():
    pairs = random_pairs(400)
    assert sum(reference_scores(p, g)[1] not in (0.0, 1.0) for p, g in pairs) > 50  # partial overlaps are covered
    assert sum(reference_scores(p, g)[0] for p, g in pairs) > 50
    for prediction, golds in pairs:
        em, f1_score = reference_scores(prediction, golds)
        assert normalize_answer(prediction) == reference_normalize(prediction), prediction
        assert exact_match(prediction, golds) == em, (prediction, golds)
        assert f1(prediction, golds) == pytest.approx(f1_score, abs=1e-12), (prediction, golds)


# ---- acc_substring ----------------------------------------------------------------------------------------------
def test_acc_substring_against_word_level_acc():
    cases = [  # prediction, gold, acc, acc_substring
        ("It was founded in 1832 by Ola.", "1832", 1.0, 1.0),
        ("It was founded in 18321.", "1832", 0.0, 1.0),     # a substring, not a whole word
        ("The answer is not known", "no", 0.0, 1.0),        # "no" inside "not"; acc needs yes/no exactly
        ("No.", "no", 1.0, 1.0),
        ("Velm", "Velm River", 0.0, 0.0),
        ("velmriver", "Velm River", 0.0, 0.0),               # "velm river" is not in "velmriver"
        ("anything", "The", 0.0, 0.0),                      # normalised gold is empty: never a match
    ]
    for prediction, gold, word_level, substring in cases:
        assert (acc(prediction, [gold]), acc_substring(prediction, [gold])) == (word_level, substring), prediction
    assert acc_substring("born in Kestrel Works", ["Ida", "kestrel works"]) == 1.0  # best over golds


def test_aliases_raise_every_metric():
    golds = ["United States of America", "USA", "American"]
    assert score_answer("USA", golds[:1], [], []).em == 0.0
    scores = score_answer("USA", golds, [], [])
    assert (scores.em, scores.f1, scores.acc, scores.acc_substring) == (1.0, 1.0, 1.0, 1.0)


# ---- bootstrap intervals ------------------------------------------------------------------------------------------
def scores_of(values: list[float], recall: list[float | None] | None = None) -> list[QuestionScores]:
    recall = recall or [None] * len(values)
    return [QuestionScores(em=v, f1=v, acc=v, acc_substring=v, recall=r, all_gold=None if r is None else float(r == 1))
            for v, r in zip(values, recall)]


def test_bootstrap_of_constant_scores_is_a_point():
    ci = bootstrap_ci(scores_of([1.0, 1.0, 1.0], recall=[0.5, 0.5, None]))
    assert ci["em"] == [1.0, 1.0] and ci["recall"] == [0.5, 0.5] and ci["all_gold"] == [0.0, 0.0]


def test_bootstrap_of_two_questions_by_hand():
    # resampled means of [0, 1] are 0, 1/2, 1 with probability 1/4, 1/2, 1/4: with 1,000 resamples about 250 are 0
    # and 250 are 1, so the 2.5% and 97.5% quantiles (positions 24.975 and 974.025 of 1,000) are 0 and 1
    assert bootstrap_ci(scores_of([0.0, 1.0]))["acc"] == [0.0, 1.0]


def test_bootstrap_matches_the_normal_interval_for_a_large_sample():
    # 400 questions, half right: standard error sqrt(0.25 / 400) = 0.025, so 0.5 -+ 1.96 * 0.025 = [0.451, 0.549]
    lo, hi = bootstrap_ci(scores_of([1.0, 0.0] * 200))["em"]
    assert lo == pytest.approx(0.451, abs=0.01) and hi == pytest.approx(0.549, abs=0.01)


def test_bootstrap_is_seeded_and_skips_missing_recall():
    scores = scores_of([1.0, 0.0, 0.0, 1.0, 1.0] * 10, recall=[1.0, 0.0, None, None, 0.5] * 10)
    assert bootstrap_ci(scores, seed=3) == bootstrap_ci(scores, seed=3)
    assert bootstrap_ci(scores, seed=3) != bootstrap_ci(scores, seed=4)
    lo, hi = bootstrap_ci(scores)["recall"]
    assert lo < 0.5 < hi  # the mean over the 30 questions with gold titles is (1 + 0 + 0.5) / 3 = 0.5
    with pytest.raises(ValueError, match="no scores"):
        bootstrap_ci([])


# ---- by question type, extra keys, imports -----------------------------------------------------------------------
def test_scores_by_type_by_hand():
    questions = [SimpleNamespace(type=t) for t in ("comparison", "inference", "comparison", "", "compositional")]
    by_type = scores_by_type(questions, scores_of([1.0, 0.0, 0.0, 1.0, 1.0], recall=[1.0, 0.5, None, 1.0, 0.0]))
    assert list(by_type) == ["comparison", "compositional", "inference"]  # untyped questions are left out
    assert by_type["comparison"] == {"n": 2, "em": 0.5, "f1": 0.5, "acc": 0.5, "acc_substring": 0.5, "recall": 1.0,
                                     "all_gold": 1.0}
    assert by_type["inference"]["recall"] == 0.5 and by_type["compositional"]["em"] == 1.0


def test_extra_results_keys(tmp_path):
    from orthrus_rag.eval.experiment.datasets import DatasetSpec

    (tmp_path / "q.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "question": "?", "answer": "a", "type": "comparison"}) + "\n" for i in range(5)))
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "p", "title": "T", "text": "x"}) + "\n")
    spec = DatasetSpec("mine", tmp_path / "q.jsonl", tmp_path / "c.jsonl", "all", None)
    questions = [SimpleNamespace(type="comparison")] * 2
    extra = extra_results(spec, questions, scores_of([1.0, 0.0]), MetricSettings(bootstrap_resamples=50,
                                                                                  bootstrap_seed=1))
    assert set(extra) == {"ci", "by_type", "run", "data"}
    assert extra["ci"]["resamples"] == 50 and extra["ci"]["seed"] == 1 and extra["ci"]["level"] == 0.95
    assert extra["ci"]["bounds"] == bootstrap_ci(scores_of([1.0, 0.0]), resamples=50, seed=1)
    assert extra["by_type"]["comparison"]["n"] == 2
    assert extra["data"]["questions"] == {"file": "q.jsonl", "split": "all", "answered": 2, "split_size": 5,
                                          "total": 5}
    assert extra["data"]["corpus"]["passages"] == 1 and extra["data"]["corpus"]["file"] == "c.jsonl"
    json.dumps(extra)  # results.json must hold it


def test_metric_settings_from_the_config():
    assert MetricSettings.from_config({}) == MetricSettings(1000, 0)
    assert MetricSettings.from_config({"metrics": {"bootstrap_seed": 1}}) == MetricSettings(1000, 1)


@pytest.mark.parametrize("group, message", [
    ({"bootstrap_seed": "abc"}, "metrics.bootstrap_seed: expected an integer, got 'abc'"),
    ({"bootstrap_resamples": 0}, "metrics.bootstrap_resamples must be >= 1, got 0"),
    ({"bootstrap_seed": -1}, "metrics.bootstrap_seed must be >= 0, got -1"),
    ({"bootstrap_sed": 1}, "metrics: no setting 'bootstrap_sed'"),
])
def test_a_bad_metrics_setting_is_a_user_error_naming_the_key(group, message):
    with pytest.raises(UserError, match=re.escape(message)):
        MetricSettings.from_config({"metrics": group})


def test_import_does_not_load_torch():
    code = "import sys, orthrus_rag.eval.experiment.metrics; sys.exit(3 if 'torch' in sys.modules else 0)"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, "import orthrus_rag.eval.experiment.metrics imported torch"


def test_prompt_tokens_per_question_by_hand():
    from orthrus_rag.eval.experiment.metrics import prompt_tokens

    def call(kind, prompt, cached=None):
        return {"kind": kind, "prompt_tokens": prompt, **({} if cached is None else {"cached_tokens": cached})}

    calls = [call("retrieve", 9, 0), call("reason", 100, 64), call("reason", 120, 96),
             call("reason", 50)]  # the last recorded before the cache's share was
    # computed: (100 - 64) + (120 - 96) + 50 = 110 over 2 questions; cached: 160 over 2; retrieval is not counted
    assert prompt_tokens(calls, 2) == {"computed_per_question": 55.0, "cached_per_question": 80.0,
                                       "reused_per_question": 0.0, "recomputed_per_question": 0.0}
    assert prompt_tokens([], 0) == {"computed_per_question": 0.0, "cached_per_question": 0.0,
                                    "reused_per_question": 0.0, "recomputed_per_question": 0.0}
    # 100 prompt tokens: 20 cached, 30 copied and kept, 10 copied and computed again (part of the 50 computed)
    reused = [{**call("reason", 100, 20), "reused_tokens": 30, "recomputed_tokens": 10}]
    assert prompt_tokens(reused, 1) == {"computed_per_question": 50.0, "cached_per_question": 20.0,
                                        "reused_per_question": 30.0, "recomputed_per_question": 10.0}
