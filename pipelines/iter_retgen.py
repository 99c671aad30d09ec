"""ITER-RETGEN: alternate retrieval and generation, each retrieval guided by the previous generation.

Iteration t retrieves a fresh top-k with the question plus the generation of iteration t-1, then
generates a full answer (reasoning and answer) from those passages; the last generation is the answer.
"""
from __future__ import annotations

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Passage, Pipeline, Reasoner, Retriever, extract_answer
from pipelines.prompts import load_demos, load_prompt


class IterRetGen(Pipeline):
    """Iterative retrieval-generation synergy; see the module docstring."""

    def __init__(self, retriever: Retriever, reasoner: Reasoner, *, k: int = 5, iterations: int = 3,
                 prompt: str = "cot_with_passages", demos: str = "demos.jsonl", num_demos: int = 2,
                 demo_turns: bool = False, passage_words: int = 60, max_tokens: int = 100):
        super().__init__(retriever, reasoner)
        if iterations < 1 or k < 1:
            raise ValueError(f"k and iterations must be >= 1, got k={k}, iterations={iterations}")
        self.k, self.iterations = k, iterations
        self.prompt, self.num_demos, self.passage_words = prompt, num_demos, passage_words
        self.demo_turns = demo_turns
        self.max_tokens = max_tokens
        self._template = load_prompt(prompt)
        self.demos = demos
        self._demos = load_demos(demos, num_demos) if num_demos else []

    async def answer(self, question: str) -> Answer:
        generation, passages = "", []
        for _ in range(self.iterations):
            passages = await self.retrieve(query_for(question, generation), self.k)
            generation = await self._generate(question, passages)
        return Answer(question, extract_answer(generation, from_end=True), passages)

    async def _generate(self, question: str, passages: list[Passage]) -> str:
        prompt = self._template.messages(question, passages, self._demos, self.passage_words, self.demo_turns)
        params = SamplingParams(max_tokens=self.max_tokens, stop=["\nPassages:", "\nQuestion:"])
        return (await self.reason(prompt, params)).strip()


def query_for(question: str, generation: str) -> str:
    """The retrieval query: the question, followed by the previous generation when there is one."""
    return f"{question} {generation}" if generation else question
