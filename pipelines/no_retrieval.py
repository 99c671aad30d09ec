"""No retrieval: the generator answers from what it already knows."""
from __future__ import annotations

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Pipeline, Reasoner, Retriever, extract_answer
from pipelines.prompts import load_demos, load_prompt


class NoRetrieval(Pipeline):
    """Ask the generator directly; the retriever (if given) is never used."""

    def __init__(self, retriever: Retriever | None, reasoner: Reasoner, *, prompt: str = "qa_direct",
                 demos: str = "demos.jsonl", num_demos: int = 4, demo_turns: bool = False, max_tokens: int = 32):
        super().__init__(retriever, reasoner)
        self.prompt = prompt
        self.num_demos, self.demo_turns = num_demos, demo_turns
        self.max_tokens = max_tokens
        self._template = load_prompt(prompt)
        self.demos = demos
        self._demos = load_demos(demos, num_demos) if num_demos else []

    async def answer(self, question: str) -> Answer:
        prompt = self._template.messages(question, demos=self._demos, demo_turns=self.demo_turns)
        text = await self.reason(prompt, SamplingParams(max_tokens=self.max_tokens))
        return Answer(question, extract_answer(text))
