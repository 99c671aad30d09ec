"""Shared by completions and chat: request fields to SamplingParams, and running or streaming one generation."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from orthrus_rag.engine import GenerateOutput, SamplingParams
from orthrus_rag.engine.async_engine import OFF_THREAD_CHARS
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.protocol import Prompt
from orthrus_rag.engine.tokenize import encode_text
from orthrus_rag.serving.errors import bad_request
from orthrus_rag.serving.requests import SamplingRequest
from orthrus_rag.serving.responses import PromptTokensDetails, Usage
from orthrus_rag.serving.state import ServerState


@dataclass
class Call:
    """Identity of one API call, shared by its response and all its stream chunks."""

    id: str
    created: int
    model: str


def new_call(state: ServerState, prefix: str, model: str | None) -> Call:
    """A new call to the generator (its served name); a request naming another model is refused."""
    if model not in (None, state.generator_name):
        raise bad_request(f"unknown model {model!r}: this server generates with {state.generator_name!r}",
                          "model", "model_not_found")
    return Call(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), state.generator_name)


async def engine_request(state: ServerState, req: SamplingRequest, prompt: Prompt,
                         max_tokens: int | None) -> tuple[Prompt, SamplingParams]:
    """The prompt as the engine gets it, and the request's sampling settings (the engine checks them). Without the
    client's max_tokens, `default_max_tokens` needs the prompt's length: a text prompt is tokenised here and its
    ids go to the engine, so it is tokenised once."""
    if max_tokens is None:
        prompt = await token_ids(state, prompt)
        max_tokens = default_max_tokens(state, len(prompt))
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return prompt, SamplingParams(max_tokens=max_tokens,
                                  temperature=1.0 if req.temperature is None else req.temperature,
                                  top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k, seed=req.seed,
                                  stop=stop, ignore_eos=req.ignore_eos)


async def token_ids(state: ServerState, prompt: Prompt) -> list[int]:
    """A text prompt tokenised as the engine does (a long one off the event loop); token ids as they are."""
    if isinstance(prompt, list):
        return prompt
    encode = functools.partial(encode_text, state.engine.tokenizer.encode, prompt)
    return await asyncio.to_thread(encode) if len(prompt) >= OFF_THREAD_CHARS else encode()


def default_max_tokens(state: ServerState, used: int) -> int:
    """The server's default cut to the room a prompt of `used` tokens leaves in the context; a prompt that leaves no
    room is refused without blaming a max_tokens the client did not send."""
    room = state.engine.context_length - used
    if room < 1:
        raise bad_request(f"the input ({used} tokens) leaves no room for output in the model's context length "
                          f"of {state.engine.context_length} tokens; shorten the input", "input")
    return min(state.settings.default_max_tokens, room)


def usage_of(out: GenerateOutput) -> Usage:
    used = out.usage
    return Usage(prompt_tokens=used.prompt_tokens, completion_tokens=used.completion_tokens,
                 total_tokens=used.total_tokens,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=used.cached_tokens))


async def open_stream(state: ServerState, prompt: str | list[int],
                      params: SamplingParams) -> AsyncIterator[StepOutput]:
    """The engine's output stream, started: a request the engine refuses raises here, before any byte is sent."""
    outputs = state.engine.stream_outputs(prompt, params)
    try:
        first = await anext(outputs)
    except BaseException:
        await outputs.aclose()
        raise
    return _prepend(first, outputs)


async def _prepend(first: StepOutput, rest: AsyncIterator[StepOutput]) -> AsyncIterator[StepOutput]:
    async with contextlib.aclosing(rest):  # a closed or cancelled response (client gone) aborts the request
        yield first
        async for out in rest:
            yield out
