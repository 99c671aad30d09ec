"""Question sets: the shared 2Wiki jsonl, the official 2WikiMultihopQA json, and Hugging Face datasets."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from orthrus_rag.rag.types import Passage

DEV_SIZE = 300
SPLITS = ("dev", "test", "all")


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

    @property
    def answers(self) -> list[str]:
        """The answer and its aliases, for max-over-golds metrics."""
        return [self.answer, *self.aliases]


def load_questions(path: str | Path, split: str = "test", limit: int | None = None) -> list[Question]:
    """Questions from a `.jsonl` file, an official `.json` file, or a Hugging Face id (`hf:owner/name`)."""
    text = str(path)
    if text.startswith("hf:"):
        return load_hf_questions(text[3:], split, limit)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"question file not found: {path} (give a .jsonl or .json file, "
                                "or hf:<dataset id> for a Hugging Face dataset)")
    if path.suffix == ".jsonl":
        return load_jsonl_questions(path, split, limit)
    if path.suffix == ".json":
        return load_official_questions(path, split, limit)
    raise DatasetError(f"unknown question file type {path.suffix!r} for {path}: use .jsonl or .json")


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


def load_jsonl_questions(path: str | Path, split: str = "test", limit: int | None = None) -> list[Question]:
    """One question object a line, with id, question, answer and optional aliases, gold_titles, type."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [_to_question(row, path) for row in select_split(rows, split, limit)]


def load_official_questions(path: str | Path, split: str = "test", limit: int | None = None) -> list[Question]:
    """The official 2WikiMultihopQA json: a list of objects with `_id`, `supporting_facts`, `context`, ..."""
    return [_to_question(row, path) for row in select_split(_read_official(path), split, limit)]


def load_official_corpus(path: str | Path) -> list[Passage]:
    """Passages from the official file's `context` paragraphs, one per distinct (title, text)."""
    return context_passages(_read_official(path))


def context_passages(records: Iterable[dict[str, Any]]) -> list[Passage]:
    """Deduplicated passages of the `context` paragraphs ([[title, [sentences]], ...]) of the records."""
    seen: dict[tuple[str, str], Passage] = {}
    for record in records:
        for title, sentences in _paragraphs(record.get("context") or []):
            text = " ".join(s.strip() for s in sentences if s.strip())
            seen.setdefault((title, text), Passage(id=f"ctx-{len(seen):06d}", title=title, text=text))
    return list(seen.values())


def load_hf_questions(dataset_id: str, split: str = "test", limit: int | None = None,
                      hf_split: str = "validation") -> list[Question]:
    """Questions of a Hugging Face dataset in the 2WikiMultihopQA layout; `split` applies to its `hf_split`."""
    try:
        from datasets import load_dataset

        rows = list(load_dataset(dataset_id, split=hf_split))
    except Exception as e:  # datasets raises many kinds of errors when offline or for a wrong id
        raise DatasetError(f"could not load Hugging Face dataset {dataset_id!r} (split {hf_split!r}): {e}. "
                           "When offline (HF_HUB_OFFLINE=1) only cached datasets load: download it once "
                           "online, or give a local .jsonl or .json file instead") from e
    return [_to_question(row, dataset_id) for row in select_split(rows, split, limit)]


def _read_official(path: str | Path) -> list[dict[str, Any]]:
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
                    type=row.get("type") or "")


def _fact_titles(facts: Any) -> list[str]:
    """Distinct titles of supporting facts, as [[title, sent_id], ...] or {"title": [...], ...}."""
    titles = facts.get("title", []) if isinstance(facts, dict) else [fact[0] for fact in facts or []]
    return list(dict.fromkeys(titles))


def _paragraphs(context: Any) -> list[tuple[str, list[str]]]:
    """Context as [[title, [sentences]], ...] (official) or {"title": [...], "sentences": [...]} (datasets)."""
    if isinstance(context, dict):
        return list(zip(context.get("title", []), context.get("sentences", [])))
    return [(title, sentences) for title, sentences in context]
