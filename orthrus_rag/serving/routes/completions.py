"""`POST /v1/completions`: text in, text out (or a stream of text chunks)."""
from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict

from fastapi import APIRouter, Depends, Request

from orthrus_rag.engine.output import StepOutput
from orthrus_rag.serving.generation import Call, engine_request, new_call, open_stream, usage_of
from orthrus_rag.serving.openapi import EVENT_STREAM
from orthrus_rag.serving.requests import CompletionRequest
from orthrus_rag.serving.responses import CompletionChoice, CompletionResponse
from orthrus_rag.serving.routes.embeddings import split_inputs
from orthrus_rag.serving.sse import sse_response
from orthrus_rag.serving.limits import shorten_deadline
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()


@router.post("/v1/completions", response_model=CompletionResponse, responses=EVENT_STREAM)
async def completions(req: CompletionRequest, request: Request, state: ServerState = Depends(get_state)):
    shorten_deadline(request, req.timeout)
    call = new_call(state, "cmpl", req.model)
    prompt = split_inputs(req.prompt)[0]  # one prompt: the schema allows no more
    prompt, params = await engine_request(state, req, prompt, req.max_tokens)
    if req.stream:
        return sse_response(_chunks(call, await open_stream(state, prompt, params), req.include_usage))
    out = await state.engine.generate(prompt, params)
    choice = CompletionChoice(text=out.text, finish_reason=out.finish_reason)
    return CompletionResponse(**asdict(call), choices=[choice], usage=usage_of(out))


async def _chunks(call: Call, outputs: AsyncIterator[StepOutput], include_usage: bool):
    async for out in outputs:
        if not out.delta_text and not out.finished:
            continue
        reason = out.result.finish_reason if out.finished else None
        choice = CompletionChoice(text=out.delta_text, finish_reason=reason)
        yield CompletionResponse(**asdict(call), choices=[choice])
        if out.finished and include_usage:
            yield CompletionResponse(**asdict(call), choices=[], usage=usage_of(out.result))
