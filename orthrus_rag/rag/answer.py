"""Answer extraction: pull a short answer out of what a (small) generator wrote."""
from __future__ import annotations

import re

# "So the answer is: X", "the answer is X", "Final answer: X", "The answer would be X"
_MARKER = re.compile(r"\banswer\s*(?:is|was|would\s+be|:)\s*:?\s*", re.IGNORECASE)
_LEADING_LABEL = re.compile(r"^\s*(?:final\s+answer|short\s+answer|answer|a)\s*[:\-]\s*", re.IGNORECASE)
# a copied passage label: "[3] ", "(3) ", "3) ", "3. "
_PASSAGE_LABEL = re.compile(r"^\s*(?:\[\d+\]|\(\d+\)|\d+[.)])\s+")
_TITLE_WORDS = 10
_SHORT_ANSWER_WORDS = 6
# yes/no alone, or before , ; : ! - or a sentence end ("No. 5 Squadron" is a name, not an answer "no")
_YES_NO = re.compile(r"^(yes|no)(?:$|\s*[,;:!\-]|\s*[.?](?=\s*$|\s+[^\W\d]))", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?=\s+[\"'(A-Z0-9]|\s*$)")
_INITIALISM = re.compile(r"(?:[a-z]\.)+[a-z]?")  # "U.S" or "O.K" before its last dot
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "mt", "ft", "vs", "inc", "ltd", "co", "no", "prof",
                  "gen", "col", "lt", "sgt", "capt", "rev", "hon", "etc", "jan", "feb", "mar", "apr", "aug", "sep",
                  "sept", "oct", "nov", "dec"}
_QUOTES = "\"'“”‘’`«»"
_TRAILING = " \t.,;:!"


def extract_answer(text: str, from_end: bool = False) -> str:
    """The short answer in `text`: after the last "answer is" marker if there is one, else the first
    sentence of its first line (of its last line with `from_end`, for a chain of reasoning).

    Without `from_end`, a short first line without a marker is the answer, whatever follows it (a small
    reader often answers, then rambles on: "Oslo\n\nThe answer is: 1925")."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not from_end and lines and not _MARKER.search(lines[0]) and len(lines[0].split()) <= _SHORT_ANSWER_WORDS:
        return clean_answer(lines[0])
    return find_answer(text) or clean_answer(lines[-1] if from_end and lines else text)


def find_answer(text: str) -> str | None:
    """The answer a text states with a marker such as "So the answer is: X", or None without one."""
    matches = list(_MARKER.finditer(text))
    return (clean_answer(text[matches[-1].end():]) or None) if matches else None


def clean_answer(text: str) -> str:
    """The first line and sentence of `text`, without labels, quotes, markup or trailing punctuation."""
    lines = text.replace("**", "").replace("__", "").splitlines()
    line = next((line.strip() for line in lines if line.strip()), "")
    line = _LEADING_LABEL.sub("", line, count=1)
    line = _copied_title(line)
    line = first_sentence(line).strip().strip(_QUOTES).rstrip(_TRAILING).strip(_QUOTES).strip()
    yes_no = _YES_NO.match(line)
    return yes_no.group(1).lower() if yes_no else line


def _copied_title(line: str) -> str:
    """The title when the line copies a passage as the prompts show them ("[3] Title: text" or
    "Title: Title is ..."): a reader naming the passage it found the answer in; else the line unchanged."""
    unlabelled = _PASSAGE_LABEL.sub("", line, count=1)
    head, sep, tail = unlabelled.partition(": ")
    if sep and len(head.split()) <= _TITLE_WORDS and (unlabelled != line or tail.lower().startswith(head.lower())):
        return head
    return unlabelled


def first_sentence(text: str) -> str:
    """`text` up to its first sentence end, not fooled by initials ("J. R."), initialisms ("U.S.") or abbreviations
    ("St.")."""
    for match in _SENTENCE_END.finditer(text):
        if match.group() != "." or not _is_abbreviation(text[:match.start()]):
            return text[:match.end()]
    return text


def _is_abbreviation(before: str) -> bool:
    words = before.split()
    word = words[-1].strip(_QUOTES + "(").lower() if words else ""
    return len(word) == 1 or word in _ABBREVIATIONS or _INITIALISM.fullmatch(word) is not None
