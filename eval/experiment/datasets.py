"""Question sets: the shared 2Wiki jsonl, the official 2WikiMultihopQA json, and Hugging Face datasets.

Answer aliases: a question's `aliases` (or `answer_aliases`) field plus its `answer_id`'s entry in an
`id_aliases.json` (docs/experiments.md: Metrics and `results.json`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from orthrus_rag.demo import demo_corpus_path, demo_questions_path
from orthrus_rag.rag.types import Passage
from orthrus_rag.settings import UserError, typed, user_errors

DEV_SIZE = 300
SPLITS = ("dev", "test", "all")
ALIASES_FILE = "id_aliases.json"
HF_PREFIX = "hf:"  # dataset.path=hf:<owner/name>: a Hugging Face dataset


class DatasetError(ValueError):
    """A question file or dataset that cannot be loaded."""


@dataclass
class Question:
    id: str
    question: str
    answer: str
    aliases: list[str] = field(default_factory=list)
    gold_titles: list[str] = field(default_factory=list)
    type: str = ""
    answer_id: str = ""

    @property
    def answers(self) -> list[str]:
        """The answer and its aliases, for max-over-golds metrics."""
        return [self.answer, *self.aliases]


def load_questions(path: str | Path, split: str = "test", limit: int | None = None,
                   aliases: str | Path | None = None) -> list[Question]:
    """Questions from a `.jsonl` file, an official `.json` file, or a Hugging Face id (`hf:owner/name`).
    `aliases`: an id_aliases.json file; by default the one beside the question file, if any."""
    if str(path).startswith(HF_PREFIX):
        return add_aliases(load_hf_questions(str(path).removeprefix(HF_PREFIX), split, limit),
                           load_aliases(aliases) if aliases else {})
    path = Path(path)
    questions = [_to_question(row, path) for row in select_split(read_rows(path), split, limit)]
    beside = path.with_name(ALIASES_FILE)
    aliases = aliases if aliases is not None else (beside if beside.is_file() and beside != path else None)
    return add_aliases(questions, load_aliases(aliases)) if aliases else questions


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The question objects of a `.jsonl` file (one a line) or an official `.json` file, as they are."""
    if not path.is_file():
        raise FileNotFoundError(f"question file not found: {path} (give a .jsonl or .json file, "
                                "or hf:<dataset id> for a Hugging Face dataset)")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix == ".json":
        return read_official(path)
    raise DatasetError(f"unknown question file type {path.suffix!r} for {path}: use .jsonl or .json")


def load_aliases(path: str | Path) -> dict[str, list[str]]:
    """An id_aliases.json file: one object a line, {"Q_id": ..., "aliases": [...], "demonyms": [...]}, as a map
    from Wikidata id to its aliases and demonyms."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"aliases file not found: {path} (give the 2WikiMultihopQA id_aliases.json)")
    table: dict[str, list[str]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path} line {number} is not JSON ({e}): expected one object a line") from e
        if not isinstance(row, dict) or "Q_id" not in row:
            raise DatasetError(f"{path} line {number} has no Q_id: each line is "
                               '{"Q_id": ..., "aliases": [...], "demonyms": [...]}')
        table[str(row["Q_id"])] = list(dict.fromkeys([*row.get("aliases", []), *row.get("demonyms", [])]))
    return table


def add_aliases(questions: list[Question], table: dict[str, list[str]]) -> list[Question]:
    """Each question's aliases extended by the table's entry for its answer_id (no repeats, not the answer)."""
    for q in questions:
        q.aliases = merge_aliases(q.answer, q.aliases, table.get(q.answer_id, []) if q.answer_id else [])
    return questions


def merge_aliases(answer: str, *alias_lists: Iterable[str]) -> list[str]:
    """The aliases in order, without repeats or the answer itself."""
    return [a for a in dict.fromkeys(a for aliases in alias_lists for a in aliases) if a != answer]


def select_split(rows: Sequence[dict[str, Any]], split: str, limit: int | None) -> list[dict[str, Any]]:
    """dev = the first 300 rows, test = the rest, all = every row; rows with a `split` field use it instead.
    `limit` keeps the first N of the split."""
    if split not in SPLITS:
        raise DatasetError(f"split must be one of {SPLITS}, got {split!r}")
    if split == "all":
        chosen = list(rows)
    elif rows and all("split" in row for row in rows):
        chosen = [row for row in rows if row["split"] == split]
    else:
        chosen = list(rows[:DEV_SIZE] if split == "dev" else rows[DEV_SIZE:])
    return chosen if limit is None else chosen[:limit]


def context_passages(records: Iterable[dict[str, Any]], prefix: str = "ctx") -> list[Passage]:
    """Deduplicated passages of the `context` paragraphs ([[title, [sentences]], ...]) of the records, in order of
    first appearance, with ids `<prefix>-000000`, ..."""
    seen: dict[tuple[str, str], Passage] = {}
    for record in records:
        for title, text in record_paragraphs(record):
            seen.setdefault((title, text), Passage(id=f"{prefix}-{len(seen):06d}", title=title, text=text))
    return list(seen.values())


def record_paragraphs(record: dict[str, Any]) -> list[tuple[str, str]]:
    """A record's context as (title, text) pairs, the sentences joined by single spaces. The context is
    [[title, [sentences]], ...] (official) or {"title": [...], "sentences": [...]} (datasets)."""
    context = record.get("context") or []
    if isinstance(context, dict):
        context = zip(context.get("title", []), context.get("sentences", []))
    return [(title, " ".join(s.strip() for s in sentences if s.strip())) for title, sentences in context]


def load_hf_questions(dataset_id: str, split: str = "test", limit: int | None = None) -> list[Question]:
    """Questions of a Hugging Face dataset in the 2WikiMultihopQA layout; `split` applies to its validation split."""
    try:
        from datasets import load_dataset

        rows = list(load_dataset(dataset_id, split="validation"))
    except Exception as e:  # datasets raises many kinds of errors when offline or for a wrong id
        raise DatasetError(f"could not load Hugging Face dataset {dataset_id!r} (split 'validation'): {e}. "
                           "When offline (HF_HUB_OFFLINE=1) only cached datasets load: download it once "
                           "online, or give a local .jsonl or .json file instead") from e
    return [_to_question(row, dataset_id) for row in select_split(rows, split, limit)]


def read_official(path: str | Path) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise DatasetError(f"{path} holds a JSON {type(data).__name__}; the official 2WikiMultihopQA "
                           "format is a list of question objects")
    return data


def _to_question(row: dict[str, Any], source: Any) -> Question:
    missing = [key for key in ("question", "answer") if key not in row]
    if missing or not ("id" in row or "_id" in row):
        raise DatasetError(f"a question in {source} lacks {missing or ['id']} (keys: {sorted(row)}); "
                           "each needs id (or _id), question and answer")
    return Question(id=str(row.get("id", row.get("_id"))), question=row["question"], answer=str(row["answer"]),
                    aliases=list(row.get("aliases") or row.get("answer_aliases") or []),
                    gold_titles=list(row.get("gold_titles") or _fact_titles(row.get("supporting_facts"))),
                    type=row.get("type") or "", answer_id=str(row.get("answer_id") or ""))


def _fact_titles(facts: Any) -> list[str]:
    """Distinct titles of supporting facts, as [[title, sent_id], ...] or {"title": [...], ...}."""
    titles = facts.get("title", []) if isinstance(facts, dict) else [fact[0] for fact in facts or []]
    return list(dict.fromkeys(titles))


@dataclass
class DatasetSpec:
    """The `dataset` group; `path` and `corpus` are made absolute (relative paths are from where the command was
    run; an `hf:<dataset id>` is kept as given), null ones are the embedded demo set's."""

    name: str
    path: Path | str | None
    corpus: Path | str | None
    split: str
    limit: int | None

    def __post_init__(self) -> None:
        self.path = data_source(self.path) if self.path else demo_questions_path()
        self.corpus = data_source(self.corpus) if self.corpus else demo_corpus_path()
        if self.limit is not None and self.limit < 0:
            raise UserError(f"dataset.limit: expected null (every question of the split) or an integer >= 0, "
                            f"got {self.limit}")

    @classmethod
    def from_config(cls, dataset: DictConfig) -> DatasetSpec:
        return typed(cls, dataset, "dataset")


def data_source(path: str | Path) -> Path | str:
    if str(path).startswith(HF_PREFIX):
        return str(path)
    return Path(to_absolute_path(str(path))).resolve()


def read_questions(spec: DatasetSpec) -> list:
    with user_errors(FileNotFoundError, DatasetError, prefix=f"dataset {spec.name!r}: ",
                     suffix=". Set dataset.path=<questions file> and dataset.corpus=<corpus file> (for dataset=2wiki, "
                     "or ORTHRUS_RAG_DATA=<folder>)"):
        questions = load_questions(spec.path, spec.split, spec.limit)
    if not questions:
        raise UserError(f"dataset {spec.name!r} has no questions in split {spec.split!r} of {spec.path} "
                        f"(limit {spec.limit}): choose another dataset.split or dataset.limit")
    return questions
