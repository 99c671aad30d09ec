"""(query, passage) training pairs: a passage's title as a query for its passage (bare, or written into the form of
a dev question), and questions of a dev split paired with each of their gold passages (`corpus_ids`)."""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from orthrus_rag.indexes.corpus import load_corpus
from orthrus_rag.rag.types import Passage


@dataclass(frozen=True)
class Pair:
    query: str
    passage: str  # the passage as embedded for an index: Passage.formatted()
    passage_id: str  # in-batch negatives skip other pairs with the same passage
    source: str  # "title" | "template" | "question"


@dataclass(frozen=True)
class PairSource:
    """Where pairs come from. `question_lines` takes the first N lines of `questions` (for the shared 2Wiki file,
    lines 1-300 are its dev split; the rest is test and must never be trained on)."""

    corpus: str
    questions: str | None = None
    question_lines: int = 0
    question_repeats: int = 1  # each question pair this many times (questions are rarer than titles)
    title_pairs: bool = True
    title_templates: bool = False  # title queries written into the questions' forms (without questions: bare)


def corpus_pairs(passages: dict[str, Passage]) -> list[Pair]:
    """One pair a titled passage: its title as the query."""
    return [Pair(p.title, p.formatted(), pid, "title") for pid, p in passages.items() if p.title.strip()]


def question_pairs(path: str | Path, lines: int, passages: dict[str, Passage]) -> list[Pair]:
    """The first `lines` questions of a jsonl file, each paired with each of its gold passages (`corpus_ids`)."""
    pairs = []
    for row in map(json.loads, _lines(path, lines)):
        for pid in row.get("corpus_ids") or []:
            if pid not in passages:
                raise ValueError(f"{path}: question {row.get('id')!r} names passage {pid!r}, not in the corpus")
            pairs.append(Pair(row["question"], passages[pid].formatted(), pid, "question"))
    return pairs


SLOT = "\x00"  # where a template takes a title


def question_templates(path: str | Path, lines: int) -> list[str]:
    """The distinct forms of the first `lines` questions: each question with the gold titles it names (matched
    case-insensitively, as 2Wiki title-cases them) replaced by SLOT; questions naming none, or more than two, give
    none. "Which film came out first, 3 Dots or Dying God?" gives "Which film came out first, SLOT or SLOT?"."""
    templates = {}
    for row in map(json.loads, _lines(path, lines)):
        question = row["question"]
        for title in sorted(set(row.get("gold_titles") or []), key=len, reverse=True):
            question = re.sub(re.escape(title), SLOT, question, flags=re.IGNORECASE)
        if 1 <= question.count(SLOT) <= 2:
            templates.setdefault(question, None)
    return list(templates)


def fill(template: str, titles: list[str]) -> str:
    """A template with its slots taken by `titles` in order, title-cased the way 2Wiki questions write names."""
    parts = template.split(SLOT)
    return parts[0] + "".join(title.title() + rest for title, rest in zip(titles, parts[1:]))


def templated_title_pairs(passages: dict[str, Passage], templates: list[str], seed: int) -> list[Pair]:
    """For each titled passage a query in a random template's form naming its title; a two-slot template names a
    second random passage as well (in random order) and pairs the query with both, as a comparison question's two
    gold passages."""
    if not templates:
        raise ValueError("title_templates: no question names one of its gold_titles, so there is no form to write "
                         "titles into; give questions with gold_titles or set title_templates=false")
    rng = random.Random(seed)
    titled = [p for p in passages.values() if p.title.strip()]
    pairs = []
    for passage in titled:
        template = rng.choice(templates)
        named = [passage] if template.count(SLOT) == 1 else rng.sample([passage, _other(titled, passage, rng)], 2)
        query = fill(template, [p.title for p in named])
        pairs += [Pair(query, p.formatted(), p.id, "template") for p in named]
    return pairs


def _other(passages: list[Passage], passage: Passage, rng: random.Random) -> Passage:
    while (other := rng.choice(passages)) is passage and len(passages) > 1:
        pass
    return other


def _lines(path: str | Path, lines: int) -> list[str]:
    return [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()][:lines]


def load_pairs(source: PairSource, seed: int = 0) -> list[Pair]:
    """The pairs `source` names; `seed` picks each templated title query's template and second title."""
    passages = {p.id: p for p in load_corpus(source.corpus)}
    pairs = []
    questions = bool(source.questions) and source.question_lines > 0
    if source.title_pairs and source.title_templates and questions:
        pairs = templated_title_pairs(passages, question_templates(source.questions, source.question_lines), seed)
    elif source.title_pairs:
        pairs = corpus_pairs(passages)
    if questions:
        pairs += question_pairs(source.questions, source.question_lines, passages) * source.question_repeats
    if not pairs:
        raise ValueError(f"no training pairs from {source}: enable title pairs or give questions")
    return pairs


def split_pairs(pairs: list[Pair], held_out: int, seed: int) -> tuple[list[Pair], list[Pair]]:
    """Split by query, so no held-out query is trained on: the distinct queries in a seeded shuffle, the pairs of
    queries from its end held out until at least `held_out` distinct pairs are (for recall on pairs never trained
    on). Training keeps every other pair in order, repeats included; the held-out pairs are distinct."""
    queries = list(dict.fromkeys(p.query for p in pairs))
    random.Random(seed).shuffle(queries)
    by_query: dict[str, list[Pair]] = {}
    for pair in dict.fromkeys(pairs):
        by_query.setdefault(pair.query, []).append(pair)
    held: list[Pair] = []
    while queries and len(held) < held_out:
        held += by_query[queries.pop()]
    kept = set(queries)
    return [p for p in pairs if p.query in kept], held
