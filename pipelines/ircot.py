"""IRCoT: interleave retrieval with chain-of-thought, one reasoning sentence at a time.

Retrieve k passages with the question; then repeat: write the next reasoning sentence from the passages so
far, stop if it states the answer, else retrieve with that sentence (or, with `query=question+sentence`, the
question and the sentence) and add the top k passages not seen yet (up to a cap). The reasoning is written
as numbered lines ("1. ...", "2. ..."), and each step is started with its number, so the generator writes
one more fact instead of ending its turn. Without a stated answer, the last
sentence (or, with `final_reader`, a reader over all passages) gives the answer.

Two settings help a small generator read: with `demo_turns` the worked examples come as earlier turns of the
chat, so their passages are not mistaken for this question's; with `best_last` the passages are listed best
last, nearest the question. Both are on by default.
"""
from __future__ import annotations

from dataclasses import dataclass

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Passage, Pipeline, extract_answer, find_answer
from orthrus_rag.rag.answer import first_sentence
from pipelines.prompts import load_demos, load_prompt

QUERIES = ("sentence", "question+sentence")


@dataclass(kw_only=True)
class IRCoT(Pipeline):
    """Interleaved retrieval and chain-of-thought; see the module docstring."""

    k: int = 4
    max_steps: int = 4
    max_passages: int = 12
    query: str = "sentence"  # the retrieval query after a step: sentence | question+sentence
    fresh: bool = True  # each step adds k passages not seen yet (else: the new ones among its top k)
    final_reader: bool = True  # no answer stated: a reader answers from all passages
    prompt: str = "ircot"
    reader_prompt: str = "qa_with_passages"
    demos: str = "bridge_demos.jsonl"
    num_demos: int = 4
    demo_turns: bool = True  # demonstrations as earlier chat turns (false: inline in the prompt)
    best_last: bool = True  # list passages best last, nearest the question
    passage_words: int = 50
    max_tokens: int = 32
    reader_max_tokens: int = 32

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.k < 1 or self.max_passages < 1:
            raise ValueError(f"k, max_steps and max_passages must be >= 1, got {self.k}, {self.max_steps}, "
                             f"{self.max_passages}")
        if self.query not in QUERIES:
            raise ValueError(f"query must be one of {QUERIES}, got {self.query!r}")
        self._template = load_prompt(self.prompt)
        self._reader = load_prompt(self.reader_prompt)
        self._demos = load_demos(self.demos, self.num_demos) if self.num_demos else []

    async def answer(self, question: str) -> Answer:
        passages = (await self.retrieve(question, self.k))[: self.max_passages]
        reasoning: list[str] = []
        for step in range(self.max_steps):
            sentence = await self._next_sentence(question, passages, reasoning)
            if not sentence or sentence in reasoning:  # nothing new to say: stop early
                break
            reasoning.append(sentence)
            stated = find_answer(sentence)
            if stated is not None:
                return Answer(question, stated, passages)
            if step + 1 < self.max_steps and len(passages) < self.max_passages:
                passages = await self._retrieve_more(question, sentence, passages)
        return Answer(question, await self._fallback(question, passages, reasoning), passages)

    async def _retrieve_more(self, question: str, sentence: str, passages: list[Passage]) -> list[Passage]:
        """`passages` plus up to k more found with the sentence (k not seen yet, with `fresh`)."""
        query = sentence if self.query == "sentence" else f"{question} {sentence}"
        found = await self.retrieve(query, self.k + len(passages) if self.fresh else self.k)
        return add_new(passages, found, min(self.max_passages, len(passages) + self.k))

    async def _next_sentence(self, question: str, passages: list[Passage], reasoning: list[str]) -> str:
        """The next reasoning sentence: the generator continues the numbered steps so far after the next number."""
        shown = passages[::-1] if self.best_last else passages
        messages = self._template.messages(question, shown, self._demos, self.passage_words, self.demo_turns)
        messages.append({"role": "assistant", "content": transcript(reasoning)})
        text = await self.reason(messages, SamplingParams(max_tokens=self.max_tokens, stop=["\n"]))
        return first_sentence(text.strip()).strip()

    async def _fallback(self, question: str, passages: list[Passage], reasoning: list[str]) -> str:
        if not self.final_reader:
            return extract_answer(reasoning[-1]) if reasoning else ""
        prompt = self._reader.messages(question, passages, self._demos, self.passage_words, self.demo_turns)
        return extract_answer(await self.reason(prompt, SamplingParams(max_tokens=self.reader_max_tokens)))


def transcript(reasoning: list[str]) -> str:
    """The numbered steps so far, then the next step's number for the generator to continue."""
    return "".join(f"{i}. {s}\n" for i, s in enumerate(reasoning, 1)) + f"{len(reasoning) + 1}."


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
