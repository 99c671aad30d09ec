"""The embedded demo dataset: two-hop questions over a small corpus about an invented country."""
from __future__ import annotations

from pathlib import Path


def _data_file(name: str) -> Path:
    path = Path(__file__).resolve().parent / name
    if not path.is_file():
        raise FileNotFoundError(f"demo data file {path} is missing: reinstall orthrus-rag "
                                "(the package data of orthrus_rag.demo was not installed)")
    return path


def demo_corpus_path() -> Path:
    """The demo corpus: one {id, title, text} passage a line."""
    return _data_file("corpus.jsonl")


def demo_questions_path() -> Path:
    """The demo questions, in the same jsonl format as the shared 2Wiki questions."""
    return _data_file("questions.jsonl")
