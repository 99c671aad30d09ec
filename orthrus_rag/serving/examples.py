"""Example questions with gold answers for the web page: the embedded demo set and a dataset the server was started
with (`server.ui.dataset`), and the scoring of an answer against its example by eval/experiment/metrics.py itself, so the page
and `results.json` agree."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orthrus_rag.eval.experiment.datasets import Question, load_questions
from orthrus_rag.eval.experiment.metrics import score_answer
from orthrus_rag.demo import demo_questions_path
from orthrus_rag.rag import Passage
from orthrus_rag.serving.errors import bad_request
from orthrus_rag.serving.settings import UiSettings
from orthrus_rag.settings import user_errors

DEMO = "demo"
DATASET = "dataset"


@dataclass
class Score:
    """How an answer did against its example's gold."""

    gold: str
    aliases: list[str]
    em: float
    f1: float
    acc: float
    gold_titles: list[str]
    found_titles: list[str]  # the gold titles among the answer's passages
    recall: float | None  # share of gold titles found; None without gold titles


@dataclass
class Examples:
    """The example questions by source (`demo`, and `dataset` when one was given)."""

    sources: dict[str, list[Question]] = field(default_factory=dict)

    @classmethod
    def load(cls, ui: UiSettings) -> Examples:
        """The demo set and `server.ui.dataset`; a dataset that cannot be read is a UserError naming the key."""
        sources = {DEMO: load_questions(demo_questions_path(), split="all")}
        if ui.dataset:  # missing, unreadable, or not questions
            with user_errors(OSError, ValueError, TypeError, prefix="server.ui.dataset: "):
                sources[DATASET] = load_questions(Path(ui.dataset), split=ui.dataset_split, limit=ui.dataset_limit)
        return cls(sources)

    def listing(self, source: str) -> list[dict]:
        """The questions of one source, as the page lists them."""
        if source not in self.sources:
            raise bad_request(f"unknown example source {source!r}; this server has {sorted(self.sources)}", "source")
        return [{"id": f"{source}:{q.id}", "question": q.question, "type": q.type} for q in self.sources[source]]

    def find(self, example_id: str) -> Question:
        """The question `<source>:<id>`, or a 400 naming the field."""
        source, _, qid = example_id.partition(":")
        for question in self.sources.get(source, []):
            if question.id == qid:
                return question
        raise bad_request(f"unknown example {example_id!r}: use an id from GET /v1/rag/examples", "example")


def score(question: Question, prediction: str, passages: list[Passage]) -> Score:
    """The metrics eval/experiment/metrics.py computes for one answer, and which gold passages were found."""
    scores = score_answer(prediction, question.answers, question.gold_titles, passages)
    titles = {p.title.strip() for p in passages}
    return Score(question.answer, list(question.aliases), scores.em, scores.f1, scores.acc, list(question.gold_titles),
                 [t for t in question.gold_titles if t.strip() in titles], scores.recall)
