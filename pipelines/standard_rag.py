"""Standard RAG: retrieve once with the question, then answer from those passages."""
from __future__ import annotations

from dataclasses import dataclass

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Pipeline, extract_answer

from .prompts import load_demos, load_prompt


@dataclass(kw_only=True)
class StandardRAG(Pipeline):
    """One retrieval of `k` passages, one generation."""

    k: int = 5  # passages retrieved with the question
    prompt: str = "qa_with_passages"
    demos: str = "demos.jsonl"
    num_demos: int = 2
    demo_turns: bool = True  # demonstrations as earlier chat turns (false: inline in the prompt)
    passage_words: int = 60  # words of each passage shown
    max_tokens: int = 32

    def __post_init__(self) -> None:
        self._template = load_prompt(self.prompt)
        self._demos = load_demos(self.demos, self.num_demos) if self.num_demos else []

    async def answer(self, question: str) -> Answer:
        passages = await self.retrieve(question, self.k)
        prompt = self._template.messages(question, passages, self._demos, self.passage_words, self.demo_turns)
        text = await self.reason(prompt, SamplingParams(max_tokens=self.max_tokens))
        return Answer(question, extract_answer(text), passages)
