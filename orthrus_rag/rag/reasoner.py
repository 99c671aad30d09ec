"""Reasoners: turn a prompt into generated text."""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from orthrus_rag.engine import EngineLike, SamplingParams

Message = dict[str, str]
Prompt = Union[str, list[Message]]


@dataclass
class Reasoning:
    """Generated text and the token counts behind it."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the generator's prefix cache served
    reused_tokens: int = 0  # prompt tokens copied from the engine's passage store (runtime.passage_reuse)
    recomputed_tokens: int = 0  # prompt tokens copied from the passage store and computed again (blend)


class Reasoner(ABC):
    """Anything that generates text for a prompt. Subclasses write `reason`.

    A prompt is plain text or a list of chat messages (`{"role": ..., "content": ...}`); when the last
    message is from the assistant, the generation continues that message.
    """

    @abstractmethod
    async def reason(self, prompt: Prompt, params: SamplingParams) -> str:
        """The text generated for `prompt`."""

    async def reason_with_usage(self, prompt: Prompt, params: SamplingParams,
                                passages: Sequence[str] = ()) -> Reasoning:
        """Like `reason`, with token counts when the reasoner knows them (pipelines trace this). `passages` are
        texts in the prompt that are retrieved passages, in order, whose KV a reasoner may reuse; pipelines pass
        them only to a reasoner whose `passage_spans` is true."""
        return Reasoning(await self.reason(prompt, params))


class EngineReasoner(Reasoner):
    """Generates with the engine, through the generator's chat template unless told otherwise."""

    def __init__(self, engine: EngineLike, use_chat_template: bool = True, passage_spans: bool = False):
        self.engine = engine
        self.use_chat_template = use_chat_template
        self.passage_spans = passage_spans  # send passages as token spans (runtime.passage_reuse != exact)

    async def reason(self, prompt: Prompt, params: SamplingParams) -> str:
        return (await self.reason_with_usage(prompt, params)).text

    async def reason_with_usage(self, prompt: Prompt, params: SamplingParams,
                                passages: Sequence[str] = ()) -> Reasoning:
        text = self.render(prompt)
        if self.passage_spans and passages:
            ids, spans = token_spans(self.engine.tokenizer, text, passages)
            out = await self.engine.generate(ids, dataclasses.replace(params, passage_spans=spans))
        else:
            out = await self.engine.generate(text, params)
        usage = out.usage
        return Reasoning(out.text, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                         getattr(usage, "reused_tokens", 0), getattr(usage, "recomputed_tokens", 0))

    def render(self, prompt: Prompt) -> str:
        """The exact text sent to the generator."""
        messages = as_messages(prompt)
        if not self.use_chat_template:
            return "\n".join(m["content"] for m in messages)
        return apply_chat_template(self.engine.tokenizer, messages)


def token_spans(tokenizer: Any, text: str, passages: Sequence[str]) -> tuple[list[int], list[list[int]]]:
    """`text`'s token ids (as the engine would encode it) and, for each of `passages` found in it in order, the
    [start, end) of the tokens wholly inside it; a passage not found, or with no token of its own, has no span."""
    encoded = tokenizer(text, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    spans, cursor, token = [], 0, 0
    for passage in passages:
        begin = text.find(passage, cursor) if passage else -1
        if begin < 0:
            continue
        cursor = begin + len(passage)
        while token < len(ids) and offsets[token][0] < begin:
            token += 1
        start = token
        while token < len(ids) and offsets[token][1] <= cursor and offsets[token][1] > offsets[token][0]:
            token += 1
        if token > start and token < len(ids):
            spans.append([start, token])
    return ids, spans


def apply_chat_template(tokenizer: Any, messages: list[Message]) -> str:
    """The text a generator sees for chat `messages`; the one rule for the reasoner and the HTTP chat endpoint.

    A `developer` message counts as `system` (OpenAI's newer name for it). When the last message is from the
    assistant, the generation continues that message (a prefilled start); otherwise the assistant's turn begins.
    """
    plain = [{"role": "system" if m["role"] == "developer" else m["role"], "content": m["content"]} for m in messages]
    continues = plain[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=not continues,
                                         continue_final_message=continues)


def as_messages(prompt: Prompt) -> list[Message]:
    """A prompt as a checked list of chat messages (plain text becomes one user message)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not prompt:
        raise TypeError(f"a prompt must be a string or a non-empty list of messages, got {type(prompt).__name__}")
    for message in prompt:
        if not isinstance(message, dict) or not {"role", "content"} <= message.keys():
            raise TypeError(f"each message needs 'role' and 'content' keys, got {message!r}")
    return prompt
