"""Shared by completions and chat: request fields to SamplingParams, and running or streaming one generation."""
from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from orthrus_rag.engine import GenerateOutput, SamplingParams
from orthrus_rag.engine.async_engine import OFF_THREAD_CHARS
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.protocol import Prompt
from orthrus_rag.serving.errors import bad_request
from orthrus_rag.serving.requests import SamplingRequest
from orthrus_rag.serving.responses import Usage
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


async def sampling_params(state: ServerState, req: SamplingRequest, prompt: Prompt,
                          max_tokens: int | None) -> SamplingParams:
    """The request's sampling settings; without the client's max_tokens, `default_max_tokens`."""
    if max_tokens is None:
        max_tokens = await default_max_tokens(state, prompt)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    params = SamplingParams(max_tokens=max_tokens,
                            temperature=1.0 if req.temperature is None else req.temperature,
                            top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k, seed=req.seed,
                            stop=stop, ignore_eos=req.ignore_eos)
    params.validate()  # InvalidRequestError: a 400 naming the field (errors.as_api_error), before anything starts
    return params


async def default_max_tokens(state: ServerState, prompt: Prompt) -> int:
    """The server's default cut to the room the prompt leaves in the context; a prompt that leaves no room is refused
    without blaming a max_tokens the client did not send."""
    if isinstance(prompt, list):
        used = len(prompt)
    elif len(prompt) >= OFF_THREAD_CHARS:  # tokenised as the engine does; a long text off the event loop
        used = len(await asyncio.to_thread(state.engine.tokenizer.encode, prompt))
    else:
        used = len(state.engine.tokenizer.encode(prompt))
    room = state.engine.context_length - used
    if room < 1:
        raise bad_request(f"the input ({used} tokens) leaves no room for output in the model's context length "
                          f"of {state.engine.context_length} tokens; shorten the input", "input")
    return min(state.settings.default_max_tokens, room)


def usage_of(out: GenerateOutput) -> Usage:
    return Usage.model_validate(out.usage, from_attributes=True)


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
