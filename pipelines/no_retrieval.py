"""No retrieval: the generator answers from what it already knows."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Pipeline, extract_answer

from .prompts import load_demos, load_prompt


@dataclass(kw_only=True)
class NoRetrieval(Pipeline):
    """Ask the generator directly; the retriever (if given) is never used."""

    retrieves: ClassVar[bool] = False
    prompt: str = "qa_direct"
    demos: str = "demos.jsonl"
    num_demos: int = 4
    demo_turns: bool = True  # demonstrations as earlier chat turns (false: inline in the prompt)
    max_tokens: int = 32

    def __post_init__(self) -> None:
        self._template = load_prompt(self.prompt)
        self._demos = load_demos(self.demos, self.num_demos) if self.num_demos else []

    async def answer(self, question: str) -> Answer:
        prompt = self._template.messages(question, demos=self._demos, demo_turns=self.demo_turns)
        text = await self.reason(prompt, SamplingParams(max_tokens=self.max_tokens))
        return Answer(question, extract_answer(text))
