"""Prompt templates and few-shot demonstrations, kept as plain files in this folder (the files, the fields of
`NAME.txt` and `NAME.passage.txt`, and how a name or path is found: pipelines/README.md).

A demonstration is rendered with `NAME.demo.txt` (fields {question}, {passages}, {answer}, {reasoning}, and {steps}:
the reasoning as numbered lines) from a demo file such as `demos.jsonl`. As chat turns instead (`demo_turns`), each
demonstration is a user turn (the prompt for its question and passages) and an assistant turn (the last field of
`NAME.demo.txt`: its answer, reasoning or steps).
"""
from __future__ import annotations

import json
import os
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orthrus_rag.rag.reasoner import Message
from orthrus_rag.rag.types import Passage

PROMPT_DIR = Path(__file__).parent
_FIELDS = ("question", "passages", "demos", "answer", "reasoning", "steps")
_PASSAGE_FIELDS = ("number", "title", "text")


@dataclass
class Demo:
    """One worked example: a question, the passages that answer it, the reasoning steps and the answer."""

    question: str
    answer: str
    passages: list[Passage] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)


@dataclass
class PromptTemplate:
    """A prompt template and the template its demonstrations are rendered with (if any)."""

    name: str
    text: str
    demo_text: str = ""
    passage_text: str = ""  # how one passage is shown ({number}, {title}, {text}); "" = "[1] Title: text"

    def render(self, question: str, passages: Sequence[Passage] = (), demos: Sequence[Demo] = (),
               passage_words: int = 60) -> str:
        shown = "\n\n".join(self.render_demo(d, passage_words) for d in demos)
        text = _fill(self.name, self.text, question=question, demos=shown,
                     passages=format_passages(passages, passage_words, self.passage_text))
        return re.sub(r"\n{3,}", "\n\n", text).strip("\n")  # an empty {demos} leaves no gap

    def messages(self, question: str, passages: Sequence[Passage] = (), demos: Sequence[Demo] = (),
                 passage_words: int = 60, demo_turns: bool = False) -> list[Message]:
        """The prompt as chat messages: the demonstrations inline in one user turn, or as earlier turns."""
        if not demo_turns:
            return [{"role": "user", "content": self.render(question, passages, demos, passage_words)}]
        turns: list[Message] = []
        for demo in demos:
            turns += [{"role": "user", "content": self.render(demo.question, demo.passages, (), passage_words)},
                      {"role": "assistant", "content": self.render_reply(demo)}]
        return [*turns, {"role": "user", "content": self.render(question, passages, (), passage_words)}]

    def render_reply(self, demo: Demo) -> str:
        """What the assistant says in a demonstration: the value of the last field of the demo template."""
        fields = [f for _, f, _, _ in string.Formatter().parse(self._demo_template()) if f]
        replies = {"answer": demo.answer, "reasoning": format_reasoning(demo.reasoning, demo.answer),
                   "steps": format_steps(demo.reasoning, demo.answer)}
        if not fields or fields[-1] not in replies:
            raise ValueError(f"{self.name}.demo.txt must end with {{answer}}, {{reasoning}} or {{steps}}")
        return replies[fields[-1]]

    def render_demo(self, demo: Demo, passage_words: int = 60) -> str:
        return _fill(f"{self.name}.demo", self._demo_template(), question=demo.question, answer=demo.answer,
                     passages=format_passages(demo.passages, passage_words, self.passage_text),
                     reasoning=format_reasoning(demo.reasoning, demo.answer),
                     steps=format_steps(demo.reasoning, demo.answer))

    def _demo_template(self) -> str:
        if not self.demo_text:
            raise ValueError(f"prompt {self.name!r} has no demo template ({self.name}.demo.txt); use no demos")
        return self.demo_text


def load_prompt(name: str) -> PromptTemplate:
    """The template `name` (with or without .txt) from this folder, or from a path."""
    path = _find(name, ".txt")
    stem = path.name.removesuffix(".txt")
    parts = [path.with_name(stem + suffix) for suffix in (".demo.txt", ".passage.txt")]
    demo_text, passage_text = (p.read_text().strip("\n") if p.exists() else "" for p in parts)
    template = PromptTemplate(stem, path.read_text().strip("\n"), demo_text, passage_text)
    _check_fields(template.name, template.text)
    _check_fields(template.name + ".demo", template.demo_text)
    _check_fields(template.name + ".passage", template.passage_text, _PASSAGE_FIELDS)
    return template


def load_demos(name: str = "demos.jsonl", limit: int | None = None) -> list[Demo]:
    """The demonstrations in a jsonl file: question, answer, passages [{title, text}], reasoning [sentences]."""
    path = _find(name, ".jsonl")
    demos = [_demo(json.loads(line), path, i) for i, line in enumerate(path.read_text().splitlines()) if line.strip()]
    return demos if limit is None else demos[:limit]


def format_passages(passages: Sequence[Passage], max_words: int = 60, template: str = "") -> str:
    """Numbered passages, one a line ("[1] Title: text", "[1] text" without a title), each cut to `max_words` words
    of text; or each shown with `template` ({number}, {title}, {text}), separated by a blank line when the template
    has several lines."""
    shown = [(template or ("[{number}] {title}: {text}" if p.title else "[{number}] {text}")).format_map(
        {"number": i, "title": p.title, "text": truncate_words(p.text, max_words)}) for i, p in enumerate(passages, 1)]
    return ("\n\n" if "\n" in template else "\n").join(shown)


def format_reasoning(sentences: Sequence[str], answer: str) -> str:
    """Reasoning steps one a line, closed by the answer sentence."""
    return "\n".join([*sentences, answer_sentence(answer)])


def format_steps(sentences: Sequence[str], answer: str) -> str:
    """Reasoning steps numbered "1. ...", one a line, closed by the numbered answer sentence."""
    return "\n".join(f"{i}. {s}" for i, s in enumerate([*sentences, answer_sentence(answer)], 1))


def answer_sentence(answer: str) -> str:
    return f"So the answer is: {answer}."


def truncate_words(text: str, max_words: int) -> str:
    words = text.split()
    return " ".join(words) if len(words) <= max_words else " ".join(words[:max_words]) + " ..."


def _find(name: str, suffix: str) -> Path:
    """A bare name from this folder first (then the working directory); a path (absolute, or with a folder in it)
    as given."""
    path = Path(name)
    user_file = path.is_absolute() or "/" in name or os.sep in name
    candidates = [path] if user_file else [PROMPT_DIR / name, PROMPT_DIR / (name + suffix), path]
    for path in candidates:
        if path.is_file():
            return path
    parts = (".demo.txt", ".passage.txt")
    known = sorted(p.name for p in PROMPT_DIR.glob("*" + suffix) if not p.name.endswith(parts))
    raise FileNotFoundError(f"no prompt file {name!r} (looked in {PROMPT_DIR} and at that path); known: {known}")


def _demo(row: dict, path: Path, i: int) -> Demo:
    try:
        passages = [Passage(f"demo-{i}-{j}", p["title"], p["text"]) for j, p in enumerate(row.get("passages", []))]
        return Demo(row["question"], row["answer"], passages, list(row.get("reasoning", [])))
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path} line {i + 1}: a demo needs question, answer, passages [{{title, text}}]: {e}")


def _fill(name: str, text: str, **fields: str) -> str:
    try:
        return text.format_map(fields)
    except (KeyError, IndexError) as e:
        raise ValueError(f"prompt {name!r} uses a field {e} this pipeline does not fill ({sorted(fields)})") from None


def _check_fields(name: str, text: str, allowed: tuple[str, ...] = _FIELDS) -> None:
    for _, field_name, _, _ in string.Formatter().parse(text):
        if field_name is not None and field_name not in allowed:
            raise ValueError(f"prompt {name!r} has an unknown field {{{field_name}}}; fields are {allowed}")
