"""Shared by completions and chat: request fields to SamplingParams, and running or streaming one generation."""
from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from orthrus_rag.engine import GenerateOutput, InvalidRequestError, SamplingParams
from orthrus_rag.engine.output import StepOutput
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


def new_call(prefix: str, model: str) -> Call:
    return Call(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), model)


def check_model(state: ServerState, model: str | None) -> str:
    """The generator's served name; a request naming another model is refused."""
    if model not in (None, state.generator_name):
        raise bad_request(f"unknown model {model!r}: this server generates with {state.generator_name!r}",
                          "model", "model_not_found")
    return state.generator_name


def sampling_params(req: SamplingRequest, max_tokens: int | None, default_max_tokens: int) -> SamplingParams:
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    params = SamplingParams(max_tokens=default_max_tokens if max_tokens is None else max_tokens,
                            temperature=1.0 if req.temperature is None else req.temperature,
                            top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k, seed=req.seed,
                            stop=stop, ignore_eos=req.ignore_eos)
    try:
        params.validate()
    except InvalidRequestError as err:
        raise bad_request(str(err), err.param) from err
    return params


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
    try:
        yield first
        async for out in rest:
            yield out
    finally:  # a closed or cancelled response (client gone) aborts the request and frees its KV blocks
        await rest.aclose()
