"""Load passage corpora from jsonl or json files, and fingerprint them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from orthrus_rag.rag.types import Passage


class CorpusFormatError(ValueError):
    """A corpus file that cannot be read as passages."""


def load_corpus(path: str | Path) -> list[Passage]:
    """Read passages from `.jsonl` (one object a line) or `.json` (a list, or a dict keyed by id)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path} (give a .jsonl or .json file of passages)")
    rows = _read_jsonl(path) if path.suffix == ".jsonl" else _read_json(path)
    return [_to_passage(row, i, path) for i, row in enumerate(rows)]


def corpus_fingerprint(passages: Iterable[Passage]) -> str:
    """A short hex digest over ids, titles and texts: equal for equal corpora in equal order."""
    digest = hashlib.sha256()
    for p in passages:
        for field in (p.id, p.title, p.text):
            digest.update(field.encode("utf-8"))
            digest.update(b"\x00")
    return digest.hexdigest()[:16]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise CorpusFormatError(f"{path}:{line_no} is not valid JSON ({e.msg}); "
                                        "expected one object a line") from e
    return rows


def _read_json(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CorpusFormatError(f"{path} is not valid JSON ({e.msg}, line {e.lineno})") from e
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        return [{"id": key, **value} if isinstance(value, dict) else value for key, value in data.items()]
    raise CorpusFormatError(f"{path} holds a JSON {type(data).__name__}; expected a list of passages "
                            "or an object mapping ids to passages")


def _to_passage(row: Any, index: int, path: Path) -> Passage:
    if not isinstance(row, dict):
        raise CorpusFormatError(f"passage {index} of {path} is a {type(row).__name__}, expected an object")
    if "text" in row:
        title, text = "", str(row["text"])
    elif "contents" in row:  # "title\ntext" (the title is sometimes quoted)
        title, sep, text = str(row["contents"]).partition("\n")
        title, text = (title.strip().strip('"'), text.strip()) if sep else ("", title)
    else:
        raise CorpusFormatError(f"passage {index} of {path} has neither 'text' nor 'contents' "
                                f"(keys: {sorted(row)}); give id/title/text or contents='title\\ntext'")
    title = title if row.get("title") is None else str(row["title"])  # a null title counts as none
    return Passage(id=str(row.get("id", row.get("_id", index))), title=title, text=text)
