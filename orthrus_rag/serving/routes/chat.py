"""`POST /v1/chat/completions`: messages through the generator's chat template."""
from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict

from fastapi import APIRouter, Depends, Request
from jinja2 import TemplateError

from orthrus_rag.engine.output import StepOutput
from orthrus_rag.rag.reasoner import apply_chat_template
from orthrus_rag.serving.errors import bad_request
from orthrus_rag.serving.generation import Call, engine_request, new_call, open_stream, usage_of
from orthrus_rag.serving.openapi import EVENT_STREAM
from orthrus_rag.serving.requests import ChatCompletionRequest, ChatMessage
from orthrus_rag.serving.responses import (AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionChunk,
                                           ChatCompletionResponse, ChatDelta)
from orthrus_rag.serving.sse import sse_response
from orthrus_rag.serving.limits import shorten_deadline
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=EVENT_STREAM)
async def chat_completions(req: ChatCompletionRequest, request: Request, state: ServerState = Depends(get_state)):
    shorten_deadline(request, req.timeout)
    call = new_call(state, "chatcmpl", req.model)
    if len(req.messages) > state.settings.max_chat_messages:
        raise bad_request(f"{len(req.messages)} messages in one request; this server takes at most "
                          f"{state.settings.max_chat_messages} (server.max_chat_messages): shorten the conversation",
                          "messages", "too_many_messages")
    prompt = render_chat(state.engine.tokenizer, req.messages)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    prompt, params = await engine_request(state, req, prompt, max_tokens)
    if req.stream:
        return sse_response(_chunks(call, await open_stream(state, prompt, params), req.include_usage))
    out = await state.engine.generate(prompt, params)
    choice = ChatChoice(message=AssistantMessage(content=out.text), finish_reason=out.finish_reason)
    return ChatCompletionResponse(**asdict(call), choices=[choice], usage=usage_of(out))


def render_chat(tokenizer, messages: list[ChatMessage]) -> str:
    """The exact prompt text the generator sees for `messages` (the reasoner's rule: `apply_chat_template`); a
    conversation the chat template refuses (e.g. roles out of order) is a 400."""
    if tokenizer.chat_template is None:
        raise bad_request("the generator has no chat template; use /v1/completions", "messages")
    try:
        return apply_chat_template(tokenizer, [{"role": m.role, "content": m.text()} for m in messages])
    except TemplateError as err:
        raise bad_request(f"the model's chat template refused these messages: {err}", "messages") from err


async def _chunks(call: Call, outputs: AsyncIterator[StepOutput], include_usage: bool):
    yield _chunk(call, ChatDelta(role="assistant", content=""))
    async for out in outputs:
        if out.delta_text:
            yield _chunk(call, ChatDelta(content=out.delta_text))
        if out.finished:
            yield _chunk(call, ChatDelta(), out.result.finish_reason)
            if include_usage:
                yield ChatCompletionChunk(**asdict(call), choices=[], usage=usage_of(out.result))


def _chunk(call: Call, delta: ChatDelta, finish_reason: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk(**asdict(call), choices=[ChatChunkChoice(delta=delta, finish_reason=finish_reason)])
