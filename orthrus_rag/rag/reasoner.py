"""Reasoners: turn a prompt into generated text."""
from __future__ import annotations

from abc import ABC, abstractmethod
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


class Reasoner(ABC):
    """Anything that generates text for a prompt. Subclasses write `reason`.

    A prompt is plain text or a list of chat messages (`{"role": ..., "content": ...}`); when the last
    message is from the assistant, the generation continues that message.
    """

    @abstractmethod
    async def reason(self, prompt: Prompt, params: SamplingParams) -> str:
        """The text generated for `prompt`."""

    async def reason_with_usage(self, prompt: Prompt, params: SamplingParams) -> Reasoning:
        """Like `reason`, with token counts when the reasoner knows them (pipelines trace this)."""
        return Reasoning(await self.reason(prompt, params))


class EngineReasoner(Reasoner):
    """Generates with the engine, through the generator's chat template unless told otherwise."""

    def __init__(self, engine: EngineLike, use_chat_template: bool = True):
        self.engine = engine
        self.use_chat_template = use_chat_template

    async def reason(self, prompt: Prompt, params: SamplingParams) -> str:
        return (await self.reason_with_usage(prompt, params)).text

    async def reason_with_usage(self, prompt: Prompt, params: SamplingParams) -> Reasoning:
        out = await self.engine.generate(self.render(prompt), params)
        return Reasoning(out.text, out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.cached_tokens)

    def render(self, prompt: Prompt) -> str:
        """The exact text sent to the generator."""
        messages = as_messages(prompt)
        if not self.use_chat_template:
            return "\n".join(m["content"] for m in messages)
        return apply_chat_template(self.engine.tokenizer, messages)


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
