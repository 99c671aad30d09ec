"""IRCoT: interleave retrieval with chain-of-thought, one reasoning sentence at a time (Trivedi et al., 2023).

Retrieve the top k passages for the question; then repeat, for up to `max_steps` steps: write the next
reasoning sentence from the passages held, stop if it states the answer ("So the answer is: ..."), else
retrieve the top k for that sentence and add those not held yet (0 to k new), up to `max_passages` in all.
A reader then answers the question from all passages held. These are the published method's defaults
(8 steps, a cap of 15 passages, whole paragraphs, a separate reader); the paper picks k on dev from 2, 4, 6
and 8, and so does this one: k=2 and k=4 answer best and k=4 finds more gold passages, so k=4 (docs/results.md,
"k for IRCoT, chosen on dev").

Settings that depart from the paper, for comparison (each off by default):
- `answer_from: chain` returns the chain's own stated answer when it states one (the reader answers otherwise).
- `answer_from: conclude` returns the stated answer too, and otherwise shows the chain every passage held and
  lets it write "N. So the answer is: ...": no separate reader prompt, so the prefix cache serves the whole
  conclusion prompt but the passages retrieved after the last step.
- `passage_order: retrieval` lists the passages in the order retrieved instead of best last (nearest the question),
  so each step's prompt extends the previous one and the prefix cache serves all but the new tail. On dev, with
  `conclude`, it computed 2.4-4.4x fewer prefill tokens and found a few gold passages fewer; SmolLM2 answered fewer
  questions with it, Qwen2.5-Coder-0.5B about as many (its leaderboard row runs it, with k=6; pipelines/README.md,
  "Prompts that reuse the KV cache").
- `fresh: true` adds k passages not held yet at every step (instead of the new ones among the top k).
- `query: question+sentence` retrieves with the question and the sentence (the paper uses the sentence).

The reader has demonstrations of its own (`reader_demos`, `reader_num_demos`), by default the chain's four worked
examples with their answers only: with them the 135M reader sometimes answers with one of their made-up names, but
more answers are right than with `standard_rag`'s two (docs/results.md, "IRCoT's reader demonstrations").

Deliberate differences that stay: the paper retrieves with BM25, here with whatever retriever the stack is given
(`index.retrieval`: hybrid BM25 + dense MiniLM by default, `bm25` the paper's; on dev hybrid found about as many
gold passages as dense and answered fewer: docs/results.md); the reasoning is written as numbered lines
("1. ...", "2. ..."), each step started with its number, so a small generator writes one more fact instead of
ending its turn; with `demo_turns` the worked examples are earlier turns of the chat; passages are cut at
`passage_words` words (the corpus's paragraphs average 71, so most are whole).
"""
from __future__ import annotations

from dataclasses import dataclass

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Passage, Pipeline, extract_answer, find_answer
from orthrus_rag.rag.answer import clean_answer, first_sentence
from orthrus_rag.rag.reasoner import Message

from .prompts import load_demos, load_prompt, truncate_words

QUERIES = ("sentence", "question+sentence")
ANSWER_FROM = ("reader", "chain", "conclude")
PASSAGE_ORDERS = ("retrieval", "best_last")


@dataclass(kw_only=True)
class IRCoT(Pipeline):
    """Interleaved retrieval and chain-of-thought; see the module docstring."""

    k: int = 4  # passages retrieved per query
    max_steps: int = 8  # reasoning sentences at most
    max_passages: int = 15  # cap on the passages held
    query: str = "sentence"  # the retrieval query after a step: sentence | question+sentence
    fresh: bool = False  # each step adds k passages not held yet (else: the new ones among its top k)
    answer_from: str = "reader"  # reader: a separate reader over all passages | chain: the chain's stated answer
    #                               | conclude: the chain, shown every passage held, concludes (prefix-cached)
    passage_order: str = "best_last"  # best_last: best nearest the question | retrieval: as retrieved (prefix cache)
    prompt: str = "ircot"
    reader_prompt: str = "qa_with_passages"
    demos: str = "bridge_demos.jsonl"
    num_demos: int = 4
    demo_turns: bool = True  # demonstrations as earlier chat turns (false: inline in the prompt)
    passage_words: int = 120  # words of each passage shown
    max_tokens: int = 32
    reader_demos: str = "bridge_demos.jsonl"  # the reader's demonstrations
    reader_num_demos: int = 4
    reader_max_tokens: int = 32

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.k < 1 or self.max_passages < 1:
            raise ValueError(f"k, max_steps and max_passages must be >= 1, got {self.k}, {self.max_steps}, "
                             f"{self.max_passages}")
        for name, allowed in (("query", QUERIES), ("answer_from", ANSWER_FROM), ("passage_order", PASSAGE_ORDERS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        self._template = load_prompt(self.prompt)
        self._reader = load_prompt(self.reader_prompt)
        self._demos = load_demos(self.demos, self.num_demos) if self.num_demos else []
        self._reader_demos = load_demos(self.reader_demos, self.reader_num_demos) if self.reader_num_demos else []

    async def answer(self, question: str) -> Answer:
        passages = (await self.retrieve(question, self.k))[: self.max_passages]
        reasoning: list[str] = []
        stated = None
        for step in range(self.max_steps):
            sentence = await self._next_sentence(question, passages, reasoning)
            if not sentence or sentence in reasoning:  # nothing new to say: stop early
                break
            reasoning.append(sentence)
            stated = find_answer(sentence)
            if stated is not None:
                break
            if step + 1 < self.max_steps and len(passages) < self.max_passages:
                passages = await self._retrieve_more(question, sentence, passages)
        if stated is not None and self.answer_from in ("chain", "conclude"):
            return Answer(question, stated, passages)
        if self.answer_from == "conclude":
            return Answer(question, await self._conclude(question, passages, reasoning), passages)
        return Answer(question, await self._read(question, passages), passages)

    async def _retrieve_more(self, question: str, sentence: str, passages: list[Passage]) -> list[Passage]:
        """`passages` plus those of the top k for the sentence not held yet (k not held yet, with `fresh`)."""
        query = sentence if self.query == "sentence" else f"{question} {sentence}"
        found = await self.retrieve(query, self.k + len(passages) if self.fresh else self.k)
        return add_new(passages, found, min(self.max_passages, len(passages) + self.k))

    async def _next_sentence(self, question: str, passages: list[Passage], reasoning: list[str]) -> str:
        """The next reasoning sentence: the generator continues the numbered steps so far after the next number."""
        text = await self.reason(self._chain_prompt(question, passages, transcript(reasoning)),
                                 SamplingParams(max_tokens=self.max_tokens, stop=["\n"]),
                                 self._texts(self._shown(passages)))
        return first_sentence(text.strip()).strip()

    async def _conclude(self, question: str, passages: list[Passage], reasoning: list[str]) -> str:
        """The chain's answer from every passage held: the step prompt, then "N. So the answer is:" to continue.
        It starts as the last step's prompt did, so the prefix cache serves all but the passages added since."""
        prompt = self._chain_prompt(question, passages, transcript(reasoning) + " So the answer is:")
        text = await self.reason(prompt, SamplingParams(max_tokens=self.reader_max_tokens, stop=["\n"]),
                                 self._texts(self._shown(passages)))
        return clean_answer(text)

    def _chain_prompt(self, question: str, passages: list[Passage], reply: str) -> list[Message]:
        """The reasoning prompt over `passages` (in `passage_order`), the assistant's reply begun with `reply`."""
        messages = self._template.messages(question, self._shown(passages), self._demos, self.passage_words,
                                           self.demo_turns)
        return [*messages, {"role": "assistant", "content": reply}]

    async def _read(self, question: str, passages: list[Passage]) -> str:
        """The reader: a short answer to the question from all passages held."""
        prompt = self._reader.messages(question, passages, self._reader_demos, self.passage_words, self.demo_turns)
        return extract_answer(await self.reason(prompt, SamplingParams(max_tokens=self.reader_max_tokens),
                                                self._texts(passages)))

    def _shown(self, passages: list[Passage]) -> list[Passage]:
        """The passages in the order the reasoning prompt shows them (`passage_order`)."""
        return passages[::-1] if self.passage_order == "best_last" else passages

    def _texts(self, passages: list[Passage]) -> list[str]:
        """Each passage's text as the prompt shows it: what the engine may reuse the KV of (runtime.passage_reuse)."""
        return [truncate_words(p.text, self.passage_words) for p in passages]


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
