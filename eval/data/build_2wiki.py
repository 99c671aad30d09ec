"""Build the `questions.jsonl` / `corpus.jsonl` pair from the official 2WikiMultihopQA `dev.json`.

Its options and what the two files hold: docs/experiments.md (Data); each question line's fields are those of
`question_row`, each corpus line is `{id, title, text}`.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..experiment.datasets import (DatasetError, context_passages, load_aliases, merge_aliases, read_official,
                                   record_paragraphs)

PASSAGE_PREFIX = "2wd"


def select_records(records: list[dict[str, Any]], ids: list[str] | None, limit: int | None) -> list[dict[str, Any]]:
    """The records named by `ids`, in that order (all records when None), then the first `limit`."""
    if ids is not None:
        by_id = {str(r["_id"]): r for r in records}
        if missing := [i for i in ids if i not in by_id]:
            raise DatasetError(f"{len(missing)} of {len(ids)} ids are not in the dev file (first: {missing[0]!r})")
        records = [by_id[i] for i in ids]
    return records if limit is None else records[:limit]


def question_row(record: dict[str, Any], passage_ids: dict[tuple[str, str], str],
                 aliases: dict[str, list[str]]) -> dict[str, Any]:
    """One questions.jsonl line for an official record; `passage_ids` maps (title, text) to corpus ids, `aliases`
    answer ids to their aliases."""
    facts = [[title, sentence] for title, sentence in record.get("supporting_facts") or []]
    gold_titles = list(dict.fromkeys(title for title, _ in facts))
    paragraphs = dict(record_paragraphs(record))
    corpus_ids = [passage_ids[(t, paragraphs[t])] for t in gold_titles if t in paragraphs]
    return {"id": str(record["_id"]), "type": record.get("type", ""), "question": record["question"],
            "answer": record["answer"], "answer_id": record.get("answer_id"),
            "aliases": merge_aliases(record["answer"], aliases.get(record.get("answer_id") or "", [])),
            "supporting_facts": facts, "gold_titles": gold_titles, "corpus_ids": corpus_ids,
            "gold_title_method": "exact", "evidences": record.get("evidences") or [], "context": None}


def build(records: list[dict[str, Any]], aliases: dict[str, list[str]] | None = None
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(question rows, corpus rows) for the chosen official records."""
    passages = context_passages(records, prefix=PASSAGE_PREFIX)
    passage_ids = {(p.title, p.text): p.id for p in passages}
    return ([question_row(r, passage_ids, aliases or {}) for r in records],
            [{"id": p.id, "title": p.title, "text": p.text} for p in passages])


def read_ids(path: Path) -> list[str]:
    """Question ids from a .jsonl file (`id` or `_id` of each line) or a text file (one id a line)."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix != ".jsonl":
        return lines
    return [str(row.get("id", row.get("_id"))) for row in map(json.loads, lines)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m orthrus_rag.eval.data.build_2wiki", description=__doc__.split("\n")[0])
    parser.add_argument("--dev", type=Path, required=True, help="the official 2WikiMultihopQA dev.json")
    parser.add_argument("--out", type=Path, required=True, help="folder for questions.jsonl and corpus.jsonl")
    parser.add_argument("--aliases", type=Path, help="the official id_aliases.json (answer aliases by answer_id)")
    parser.add_argument("--ids", type=Path, help="keep only these question ids, in this order (.jsonl or .txt)")
    parser.add_argument("--limit", type=int, help="keep the first N questions")
    args = parser.parse_args(argv)
    try:
        records = select_records(read_official(args.dev), read_ids(args.ids) if args.ids else None, args.limit)
        questions, corpus = build(records, load_aliases(args.aliases) if args.aliases else None)
    except (FileNotFoundError, DatasetError, KeyError, json.JSONDecodeError) as error:
        parser.error(f"{type(error).__name__}: {error}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("questions.jsonl", questions), ("corpus.jsonl", corpus)):
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        (args.out / name).write_text(text, encoding="utf-8")
    print(f"{args.out / 'questions.jsonl'}: {len(questions)} questions; "
          f"{args.out / 'corpus.jsonl'}: {len(corpus)} passages")


if __name__ == "__main__":
    main()
