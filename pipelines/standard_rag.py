"""Standard RAG: retrieve once with the question, then answer from those passages."""
from __future__ import annotations

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Pipeline, Reasoner, Retriever, extract_answer
from pipelines.prompts import load_demos, load_prompt


class StandardRAG(Pipeline):
    """One retrieval of `k` passages, one generation."""

    def __init__(self, retriever: Retriever, reasoner: Reasoner, *, k: int = 5, prompt: str = "qa_with_passages",
                 demos: str = "demos.jsonl", num_demos: int = 2, demo_turns: bool = False, passage_words: int = 60,
                 max_tokens: int = 32):
        super().__init__(retriever, reasoner)
        self.k = k
        self.prompt = prompt
        self.num_demos, self.demo_turns = num_demos, demo_turns
        self.passage_words = passage_words
        self.max_tokens = max_tokens
        self._template = load_prompt(prompt)
        self.demos = demos
        self._demos = load_demos(demos, num_demos) if num_demos else []

    async def answer(self, question: str) -> Answer:
        passages = await self.retrieve(question, self.k)
        prompt = self._template.messages(question, passages, self._demos, self.passage_words, self.demo_turns)
        text = await self.reason(prompt, SamplingParams(max_tokens=self.max_tokens))
        return Answer(question, extract_answer(text), passages)
