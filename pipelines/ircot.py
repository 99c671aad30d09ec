"""IRCoT: interleave retrieval with chain-of-thought, one reasoning sentence at a time.

Retrieve with the question; then repeat: write the next reasoning sentence from the passages so far,
stop if it states the answer, else retrieve with that sentence and add the new passages (up to a cap).
"""
from __future__ import annotations

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Message, Passage, Pipeline, Reasoner, Retriever, extract_answer, find_answer
from orthrus_rag.rag.answer import first_sentence
from pipelines.prompts import load_demos, load_prompt


class IRCoT(Pipeline):
    """Interleaved retrieval and chain-of-thought; see the module docstring."""

    def __init__(self, retriever: Retriever, reasoner: Reasoner, *, k: int = 5, max_steps: int = 5,
                 max_passages: int = 15, final_reader: bool = False, prompt: str = "cot_with_passages",
                 reader_prompt: str = "qa_with_passages", demos: str = "demos.jsonl", num_demos: int = 2,
                 passage_words: int = 50, max_tokens: int = 40, reader_max_tokens: int = 32):
        super().__init__(retriever, reasoner)
        if max_steps < 1 or k < 1 or max_passages < 1:
            raise ValueError(f"k, max_steps and max_passages must be >= 1, got {k}, {max_steps}, {max_passages}")
        self.k, self.max_steps, self.max_passages = k, max_steps, max_passages
        self.final_reader = final_reader
        self.prompt, self.reader_prompt = prompt, reader_prompt
        self.num_demos, self.passage_words = num_demos, passage_words
        self.max_tokens, self.reader_max_tokens = max_tokens, reader_max_tokens
        self._template = load_prompt(prompt)
        self._reader = load_prompt(reader_prompt)
        self.demos = demos
        self._demos = load_demos(demos, num_demos) if num_demos else []

    async def answer(self, question: str) -> Answer:
        passages = (await self.retrieve(question, self.k))[: self.max_passages]
        reasoning: list[str] = []
        transcript = ""  # the reasoning as the generator wrote it, line breaks included
        for step in range(self.max_steps):
            sentence, transcript = await self._next_sentence(question, passages, transcript)
            if not sentence or sentence in reasoning:  # nothing new to say: stop early
                break
            reasoning.append(sentence)
            transcript += sentence + "\n"
            stated = find_answer(sentence)
            if stated is not None:
                return Answer(question, stated, passages)
            if step + 1 < self.max_steps and len(passages) < self.max_passages:
                passages = add_new(passages, await self.retrieve(sentence, self.k), self.max_passages)
        return Answer(question, await self._fallback(question, passages, reasoning), passages)

    async def _next_sentence(self, question: str, passages: list[Passage], transcript: str) -> tuple[str, str]:
        """The next reasoning sentence (generation stops at a line break), and the transcript it follows.

        A generator that opens with a line break (it wants a blank line between steps) gets that line
        break added to the transcript and one more try.
        """
        user = self._template.render(question, passages, self._demos, self.passage_words)
        params = SamplingParams(max_tokens=self.max_tokens, stop=["\n"])
        for _ in range(2):
            messages: list[Message] = [{"role": "user", "content": user}]
            if transcript:  # the reasoning so far, which the generator continues
                messages.append({"role": "assistant", "content": transcript})
            text = (await self.reason(messages, params)).strip()
            if text:
                return first_sentence(text).strip(), transcript
            transcript += "\n"
        return "", transcript

    async def _fallback(self, question: str, passages: list[Passage], reasoning: list[str]) -> str:
        if not self.final_reader:
            return extract_answer(reasoning[-1]) if reasoning else ""
        prompt = self._reader.render(question, passages, self._demos, self.passage_words)
        return extract_answer(await self.reason(prompt, SamplingParams(max_tokens=self.reader_max_tokens)))


def add_new(passages: list[Passage], found: list[Passage], cap: int) -> list[Passage]:
    """`passages` plus those of `found` not already there (by id), in order, up to `cap` in all."""
    merged, seen = list(passages), {p.id for p in passages}
    for passage in found:
        if len(merged) >= cap:
            break
        if passage.id not in seen:
            merged.append(passage)
            seen.add(passage.id)
    return merged
