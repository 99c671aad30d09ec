"""Answer metrics (EM, F1, Acc, Acc-substring), retrieval metrics (gold passage recall), bootstrap confidence
intervals and scores by question type. EM and F1 follow the official 2WikiMultihopQA scorer.

Imports neither torch nor the engine: `import orthrus_rag.eval.experiment.metrics` is cheap.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from orthrus_rag.settings import UserError, typed

if TYPE_CHECKING:
    from orthrus_rag.rag.types import Passage

    from .datasets import DatasetSpec

YES_NO = ("yes", "no", "noanswer")
CI_LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _yes_no_clash(prediction: str, gold: str) -> bool:
    """Yes/no answers count only when matched exactly (either side being yes/no)."""
    return (gold in YES_NO or prediction in YES_NO) and prediction != gold


def _best(metric, prediction: str, golds: Sequence[str]) -> float:
    """The best `metric(prediction, gold)` over the golds, both normalised."""
    if not golds:
        raise ValueError("no gold answers given: a question needs an answer to be scored")
    pred = normalize_answer(prediction)
    return max(metric(pred, normalize_answer(gold)) for gold in golds)


def _f1(pred: str, ref: str) -> float:
    if _yes_no_clash(pred, ref):
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def _acc(pred: str, ref: str) -> float:
    if _yes_no_clash(pred, ref):
        return 0.0
    return float(bool(ref) and re.search(rf"(?:^| ){re.escape(ref)}(?: |$)", pred) is not None)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer."""
    return _best(lambda pred, ref: float(pred == ref), prediction, golds)


def f1(prediction: str, golds: Sequence[str]) -> float:
    """Token-level F1 against the best gold answer (0 for any yes/no mismatch)."""
    return _best(_f1, prediction, golds)


def acc(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when a normalised gold answer appears as whole words in the normalised prediction (yes/no: exactly)."""
    return _best(_acc, prediction, golds)


def acc_substring(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when a normalised gold answer is a substring of the normalised prediction (FlashRAG's `acc`):
    "no" counts inside "not known" and "1832" inside "18321"; an empty normalised gold never counts."""
    return _best(lambda pred, ref: float(bool(ref) and ref in pred), prediction, golds)


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
    acc_substring: float
    recall: float | None
    all_gold: float | None


def score_answer(prediction: str, golds: Sequence[str], gold_titles: Sequence[str],
                 passages: Sequence[Passage]) -> QuestionScores:
    """All metrics for one question, each the best over `golds` (answer and aliases); `passages` are those given
    to the generator."""
    return QuestionScores(em=exact_match(prediction, golds), f1=f1(prediction, golds), acc=acc(prediction, golds),
                          acc_substring=acc_substring(prediction, golds),
                          recall=passage_recall(gold_titles, passages), all_gold=all_gold(gold_titles, passages))


def score_answers(questions: Sequence, answers: Sequence) -> list[QuestionScores]:
    """`score_answer` for each question (an orthrus_rag.eval.experiment.datasets.Question) and its pipeline Answer, in order."""
    return [score_answer(a.prediction, q.answers, q.gold_titles, a.passages) for q, a in zip(questions, answers)]


def aggregate(scores: Sequence[QuestionScores]) -> dict[str, float]:
    """Means as fractions in [0, 1]; recall and all_gold average over questions that have gold titles."""
    if not scores:
        raise ValueError("no scores to aggregate: the run answered no questions")
    rows = [asdict(s) for s in scores]
    return {key: mean_of([row[key] for row in rows]) for key in rows[0]}


def mean_of(values: Sequence[float | None]) -> float:
    """The mean of the values that are not None (0.0 when all are), so recall covers questions with gold titles."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else 0.0


def prompt_tokens(calls: Iterable[Mapping[str, Any]], questions: int) -> dict[str, float]:
    """The generator's prompt tokens per question over the reasoning calls (`kind` "reason") made for `questions`
    questions: those computed, those the prefix cache served, those copied from the passage store and, of the
    computed ones, those copied and computed again (blend; a call recorded without a share counts it as computed).
    Work the engine queues itself to store passages is in its counters (`engine.passage_store`), not here."""
    calls = [e for e in calls if e["kind"] == "reason"]
    cached, reused, again = (sum(e.get(k, 0) for e in calls)
                             for k in ("cached_tokens", "reused_tokens", "recomputed_tokens"))
    n = max(questions, 1)
    return {"computed_per_question": (sum(e["prompt_tokens"] for e in calls) - cached - reused) / n,
            "cached_per_question": cached / n, "reused_per_question": reused / n,
            "recomputed_per_question": again / n}


# ---- uncertainty and breakdowns -----------------------------------------------------------------------------
def bootstrap_ci(scores: Sequence[QuestionScores], *, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED, level: float = CI_LEVEL) -> dict[str, list[float]]:
    """Percentile bootstrap interval of each mean of `aggregate`: `resamples` draws, with replacement, of as many
    questions as the mean covers (recall and all_gold cover the questions with gold titles, as in `aggregate`),
    and the (1-level)/2 and (1+level)/2 quantiles (linear interpolation) of the resampled means. Each metric starts
    from the same seed, so metrics over the same questions use the same draws."""
    if not scores:
        raise ValueError("no scores to bootstrap: the run answered no questions")
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"need resamples >= 1 and 0 < level < 1, got {resamples} and {level}")
    rows = [asdict(s) for s in scores]
    return {key: _interval([r[key] for r in rows if r[key] is not None], resamples, seed, level) for key in rows[0]}


def _interval(values: list[float], resamples: int, seed: int, level: float) -> list[float]:
    if not values:
        return [0.0, 0.0]
    draws = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
    means = np.asarray(values, dtype=float)[draws].mean(axis=1)
    return [round(float(q), 6) for q in np.quantile(means, [(1 - level) / 2, (1 + level) / 2])]


def scores_by_type(questions: Sequence, scores: Sequence[QuestionScores]) -> dict[str, dict[str, float]]:
    """`aggregate` per question type (comparison, inference, compositional, bridge_comparison, ...) with its count
    `n`, types sorted by name; questions without a type are left out."""
    groups: dict[str, list[QuestionScores]] = {}
    for question, score in zip(questions, scores):
        if question.type:
            groups.setdefault(question.type, []).append(score)
    return {kind: {"n": len(group), **aggregate(group)} for kind, group in sorted(groups.items())}


@dataclass(frozen=True)
class MetricSettings:
    """The optional `metrics` group (`+metrics.bootstrap_seed=1`): how the confidence intervals are drawn."""

    bootstrap_resamples: int = BOOTSTRAP_RESAMPLES
    bootstrap_seed: int = BOOTSTRAP_SEED

    def __post_init__(self) -> None:
        for key, least in (("bootstrap_resamples", 1), ("bootstrap_seed", 0)):
            if getattr(self, key) < least:
                raise UserError(f"metrics.{key} must be >= {least}, got {getattr(self, key)}")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> MetricSettings:
        """The run config's `metrics` group, checked (its defaults when there is none)."""
        return typed(cls, cfg.get("metrics") or {}, "metrics")


def extra_results(spec: DatasetSpec, questions: Sequence, scores: Sequence[QuestionScores],
                  settings: MetricSettings = MetricSettings()) -> dict[str, Any]:
    """The results.json keys beside `metrics`: `ci` (bootstrap intervals drawn as `settings` says), `by_type`,
    `run` (machine, versions, commit, date) and `data` (which questions of the run's dataset `spec` out of how
    many, which corpus)."""
    from .run_info import data_facts, environment

    resamples, seed = settings.bootstrap_resamples, settings.bootstrap_seed
    ci = {"level": CI_LEVEL, "method": "percentile bootstrap over questions", "resamples": resamples, "seed": seed,
          "bounds": bootstrap_ci(scores, resamples=resamples, seed=seed)}
    return {"ci": ci, "by_type": scores_by_type(questions, scores), "run": environment(),
            "data": data_facts(spec, len(questions))}
