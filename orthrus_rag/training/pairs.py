"""(query, passage) training pairs: a passage's title as a query for its passage, and questions of a dev split
paired with each of their gold passages (`corpus_ids`)."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from orthrus_rag.rag.types import Passage


@dataclass(frozen=True)
class Pair:
    query: str
    passage: str  # the passage as embedded for an index: Passage.formatted()
    passage_id: str  # in-batch negatives skip other pairs with the same passage
    source: str  # "title" | "question"


@dataclass(frozen=True)
class PairSource:
    """Where pairs come from. `question_lines` takes the first N lines of `questions` (for the shared 2Wiki file,
    lines 1-300 are its dev split; the rest is test and must never be trained on)."""

    corpus: str
    questions: str | None = None
    question_lines: int = 0
    question_repeats: int = 1  # each question pair this many times (questions are rarer than titles)
    title_pairs: bool = True


def read_passages(path: str | Path) -> dict[str, Passage]:
    """Passages of a jsonl corpus ({id, title, text} a line) by id."""
    passages = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            passages[str(row["id"])] = Passage(text=row["text"], title=row.get("title", ""), id=str(row["id"]))
    return passages


def corpus_pairs(passages: dict[str, Passage]) -> list[Pair]:
    """One pair a titled passage: its title as the query."""
    return [Pair(p.title, p.formatted(), pid, "title") for pid, p in passages.items() if p.title.strip()]


def question_pairs(path: str | Path, lines: int, passages: dict[str, Passage]) -> list[Pair]:
    """The first `lines` questions of a jsonl file, each paired with each of its gold passages (`corpus_ids`)."""
    pairs = []
    rows = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()][:lines]
    for row in map(json.loads, rows):
        for pid in row.get("corpus_ids") or []:
            if pid not in passages:
                raise ValueError(f"{path}: question {row.get('id')!r} names passage {pid!r}, not in the corpus")
            pairs.append(Pair(row["question"], passages[pid].formatted(), pid, "question"))
    return pairs


def load_pairs(source: PairSource) -> list[Pair]:
    passages = read_passages(source.corpus)
    pairs = corpus_pairs(passages) if source.title_pairs else []
    if source.questions and source.question_lines > 0:
        pairs += question_pairs(source.questions, source.question_lines, passages) * source.question_repeats
    if not pairs:
        raise ValueError(f"no training pairs from {source}: enable title pairs or give questions")
    return pairs


def split_pairs(pairs: list[Pair], held_out: int, seed: int) -> tuple[list[Pair], list[Pair]]:
    """A seeded shuffle, then the last `held_out` pairs apart (for recall on pairs never trained on)."""
    shuffled = list(pairs)
    random.Random(seed).shuffle(shuffled)
    cut = len(shuffled) - held_out
    return shuffled[:cut], shuffled[cut:]
