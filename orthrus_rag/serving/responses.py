"""Response bodies, in the OpenAI API's shapes."""
from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, Field

from orthrus_rag.engine.step_log import StepRecord
from orthrus_rag.rag.types import Answer


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0  # prompt tokens served from the engine's prefix cache, not computed


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # floats, or base64 of little-endian float32 bytes


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: Usage


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "orthrus-rag"
    kind: Literal["generator", "embedder"]


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    running: int  # requests admitted and running in the engine
    waiting: dict[str, int]  # requests waiting, by kind (embed, generate)


class RagResponse(BaseModel):
    answer: str
    passages: list[dict[str, Any]] = Field(default_factory=list)
    trace: list[dict[str, Any]] = Field(default_factory=list)

    @classmethod
    def of(cls, answer: Answer) -> RagResponse:
        """A pipeline's Answer as the response body: its prediction, passages and trace (with each call's duration)."""
        trace = [{**dataclasses.asdict(e), "duration_s": e.duration_s} for e in answer.trace]
        return cls(answer=answer.prediction, passages=[dataclasses.asdict(p) for p in answer.passages], trace=trace)


class PipelineCard(BaseModel):
    name: str
    settings: dict[str, Any]  # the pipeline's own settings (k, max_steps, ... where it has them)


class PipelineList(BaseModel):
    default: str  # the pipeline of a request that names none
    pipelines: list[PipelineCard]


class ExampleCard(BaseModel):
    id: str  # `<source>:<question id>`: what a streamed /v1/rag request names as its `example`
    question: str
    type: str


class ExampleList(BaseModel):
    sources: list[str]  # `demo`, and `dataset` when the server was started with server.ui.dataset
    source: str
    data: list[ExampleCard]


class ReplicaSteps(BaseModel):
    replica: str
    steps: list[StepRecord]  # oldest first


class EngineSteps(BaseModel):
    replicas: list[ReplicaSteps]  # one engine, or each Ray Serve replica
