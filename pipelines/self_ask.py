"""Self-ask with search: the generator asks itself follow-up questions, and each is answered from retrieval.

Retrieve k passages with the question. Then repeat: the generator writes the next line of its transcript,
either "Follow up: <question>" or "So the final answer is: <answer>". A follow-up retrieves k passages not
seen yet (up to a cap), a reader answers it from the passages it retrieved, and the transcript gains
"Intermediate answer: <answer>." Without a final answer after `max_follow_ups`, a reader answers the
question from all passages.

Deliberate differences from the paper (Press et al., 2022), where a web search engine's answer box answers
each follow-up: here a reader answers it from the retrieved passages; the question itself retrieves first,
so a chain that answers at once still read passages; and the reader steps in when no final answer comes.
The transcript prompt holds no passages, so each line's prompt extends the previous one and the prefix
cache serves all but the new tail.
"""
from __future__ import annotations

from dataclasses import dataclass

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Message, Passage, Pipeline, extract_answer, find_answer

from .ircot import add_new
from .prompts import load_demos, load_prompt

FOLLOW_UP = "Follow up:"
INTERMEDIATE = "Intermediate answer:"


@dataclass(kw_only=True)
class SelfAsk(Pipeline):
    """Follow-up questions answered by retrieval; see the module docstring."""

    k: int = 4  # passages per retrieval (the question's, then each follow-up's new ones)
    max_follow_ups: int = 3
    max_passages: int = 12  # cap on the passages held
    prompt: str = "self_ask"  # transcript prompt with its worked examples
    reader_prompt: str = "qa_with_passages"  # answers each follow-up, and the question without a stated answer
    demos: str = "demos.jsonl"  # reader demonstrations
    num_demos: int = 2
    demo_turns: bool = True  # demonstrations as earlier chat turns (false: inline in the prompt)
    passage_words: int = 50
    max_tokens: int = 32  # per transcript line
    reader_max_tokens: int = 24

    def __post_init__(self) -> None:
        if self.k < 1 or self.max_follow_ups < 1 or self.max_passages < 1:
            raise ValueError(f"k, max_follow_ups and max_passages must be >= 1, got {self.k}, "
                             f"{self.max_follow_ups}, {self.max_passages}")
        self._template = load_prompt(self.prompt)
        self._reader = load_prompt(self.reader_prompt)
        self._demos = load_demos(self.demos, self.num_demos) if self.num_demos else []

    async def answer(self, question: str) -> Answer:
        passages = (await self.retrieve(question, self.k))[: self.max_passages]
        lines: list[str] = []
        for _ in range(self.max_follow_ups):
            line = await self._next_line(question, lines)
            if "final answer" in line.lower():
                stated = find_answer(line)
                if stated is not None:
                    return Answer(question, stated, passages)
                break
            follow_up = line.removeprefix(FOLLOW_UP).strip()
            if not follow_up or f"{FOLLOW_UP} {follow_up}" in lines:  # nothing new to ask
                break
            found = await self.retrieve(follow_up, self.k + len(passages))
            passages = add_new(passages, found, min(self.max_passages, len(passages) + self.k))
            lines += [f"{FOLLOW_UP} {follow_up}", f"{INTERMEDIATE} {await self._read(follow_up, found[: self.k])}."]
        return Answer(question, await self._read(question, passages), passages)

    async def _next_line(self, question: str, lines: list[str]) -> str:
        """The generator's next line; the first one is started as a follow-up question."""
        start = "" if lines else FOLLOW_UP
        messages: list[Message] = [{"role": "user", "content": self._template.render(question)},
                                   {"role": "assistant", "content": "\n".join([*lines, start])}]
        params = SamplingParams(max_tokens=self.max_tokens, stop=["\n", INTERMEDIATE])
        return (start + await self.reason(messages, params)).strip()

    async def _read(self, question: str, passages: list[Passage]) -> str:
        """A short answer to `question` from `passages`."""
        prompt = self._reader.messages(question, passages, self._demos, self.passage_words, self.demo_turns)
        return extract_answer(await self.reason(prompt, SamplingParams(max_tokens=self.reader_max_tokens)))
