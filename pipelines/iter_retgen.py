"""ITER-RETGEN: alternate retrieval and generation, each retrieval guided by the last generation (Shao et al., 2023).

Iteration t retrieves a new top k with the question plus the generation of iteration t-1, then generates a
full answer (chain-of-thought and answer) from those passages; the last generation's answer is returned, as
in the paper. The answer's passages, which recall is scored on, are every passage the pipeline read: those of
all iterations, in the order first retrieved (at most k times `iterations`).

Deliberate differences: no generation-augmented retrieval adaptation (the paper's optional step that
distils the reader's relevance into the retriever); the worked examples come as earlier chat turns
(`demo_turns`); passages are cut at `passage_words` words. Each iteration's passages are new by design, so the
prefix cache serves only the instruction and the worked examples across iterations.
"""
from __future__ import annotations

from dataclasses import dataclass

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Passage, Pipeline, extract_answer

from .prompts import load_demos, load_prompt


@dataclass(kw_only=True)
class IterRetGen(Pipeline):
    """Iterative retrieval-generation synergy; see the module docstring."""

    k: int = 5  # passages retrieved per iteration
    iterations: int = 3  # retrieve-generate rounds
    prompt: str = "cot_with_passages"
    demos: str = "demos.jsonl"
    num_demos: int = 2
    demo_turns: bool = True  # demonstrations as earlier chat turns (false: inline in the prompt)
    passage_words: int = 60  # words of each passage shown
    max_tokens: int = 100  # per generation

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.k < 1:
            raise ValueError(f"k and iterations must be >= 1, got k={self.k}, iterations={self.iterations}")
        self._template = load_prompt(self.prompt)
        self._demos = load_demos(self.demos, self.num_demos) if self.num_demos else []

    async def answer(self, question: str) -> Answer:
        generation, read = "", {}
        for _ in range(self.iterations):
            query = f"{question} {generation}" if generation else question  # the previous generation guides it
            passages = await self.retrieve(query, self.k)
            generation = await self._generate(question, passages)
            read.update((p.id, p) for p in passages if p.id not in read)
        return Answer(question, extract_answer(generation, from_end=True), list(read.values()))

    async def _generate(self, question: str, passages: list[Passage]) -> str:
        prompt = self._template.messages(question, passages, self._demos, self.passage_words, self.demo_turns)
        params = SamplingParams(max_tokens=self.max_tokens, stop=["\nPassages:", "\nQuestion:"])
        return (await self.reason(prompt, params)).strip()
