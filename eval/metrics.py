"""Answer metrics (EM, F1, accuracy) and retrieval metrics (gold passage recall), 2WikiMultihopQA style."""
from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from orthrus_rag.rag.types import Passage

YES_NO = ("yes", "no", "noanswer")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _yes_no_clash(prediction: str, gold: str) -> bool:
    """Yes/no answers count only when matched exactly (either side being yes/no)."""
    return (gold in YES_NO or prediction in YES_NO) and prediction != gold


def _exact(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if _yes_no_clash(pred, ref):
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def _acc(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if _yes_no_clash(pred, ref):
        return 0.0
    return float(bool(ref) and re.search(rf"(?:^| ){re.escape(ref)}(?: |$)", pred) is not None)


def _best(metric, prediction: str, golds: Sequence[str]) -> float:
    if not golds:
        raise ValueError("no gold answers given: a question needs an answer to be scored")
    return max(metric(prediction, gold) for gold in golds)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer."""
    return _best(_exact, prediction, golds)


def f1(prediction: str, golds: Sequence[str]) -> float:
    """Token-level F1 against the best gold answer (0 for any yes/no mismatch)."""
    return _best(_f1, prediction, golds)


def acc(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when a normalised gold answer appears (on word boundaries) in the normalised prediction."""
    return _best(_acc, prediction, golds)


def passage_recall(gold_titles: Sequence[str], passages: Iterable[Passage]) -> float | None:
    """Fraction of gold titles among the passages' titles; None when there are no gold titles."""
    gold = {t.strip() for t in gold_titles}
    if not gold:
        return None
    found = {p.title.strip() for p in passages}
    return len(gold & found) / len(gold)


def all_gold(gold_titles: Sequence[str], passages: Iterable[Passage]) -> float | None:
    """1.0 when every gold title is among the passages' titles; None when there are no gold titles."""
    recall = passage_recall(gold_titles, passages)
    return None if recall is None else float(recall == 1.0)


@dataclass
class QuestionScores:
    em: float
    f1: float
    acc: float
    recall: float | None
    all_gold: float | None


def score_answer(prediction: str, golds: Sequence[str], gold_titles: Sequence[str],
                 passages: Sequence[Passage]) -> QuestionScores:
    """All metrics for one question; `passages` are those given to the generator."""
    return QuestionScores(em=exact_match(prediction, golds), f1=f1(prediction, golds), acc=acc(prediction, golds),
                          recall=passage_recall(gold_titles, passages), all_gold=all_gold(gold_titles, passages))


def score_answers(questions: Sequence, answers: Sequence) -> list[QuestionScores]:
    """`score_answer` for each question (an eval.datasets.Question) and its pipeline Answer, in order."""
    return [score_answer(a.prediction, q.answers, q.gold_titles, a.passages) for q, a in zip(questions, answers)]


def aggregate(scores: Sequence[QuestionScores]) -> dict[str, float]:
    """Means as fractions in [0, 1]; recall and all_gold average over questions that have gold titles."""
    if not scores:
        raise ValueError("no scores to aggregate: the run answered no questions")
    rows = [asdict(s) for s in scores]
    return {key: _mean([row[key] for row in rows]) for key in rows[0]}


def _mean(values: list[float | None]) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else 0.0
