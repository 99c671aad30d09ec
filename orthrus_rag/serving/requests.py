"""Request bodies, in the OpenAI API's shapes (unknown fields are ignored, as OpenAI clients send extras)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

TokenIds = list[StrictInt]


class OpenAIRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EmbeddingRequest(OpenAIRequest):
    input: StrictStr | list[StrictStr] | TokenIds | list[TokenIds]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


class StreamOptions(OpenAIRequest):
    include_usage: bool = False


class SamplingRequest(OpenAIRequest):
    """Fields shared by completions and chat completions."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None  # None: 1.0, as in the OpenAI API
    top_p: float | None = None
    top_k: int = 0  # extension: 0 switches the filter off
    seed: int | None = None
    stop: StrictStr | list[StrictStr] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # extension: keep generating past the end-of-sequence token
    logprobs: bool | int | None = None  # not supported: must be unset
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(SamplingRequest):
    prompt: StrictStr | TokenIds | list[StrictStr] | list[TokenIds]
    echo: bool = False  # not supported: must be false
    best_of: int | None = None  # not supported beyond 1
    suffix: str | None = None  # not supported: must be unset


class TextPart(OpenAIRequest):
    type: Literal["text"]
    text: StrictStr


class ChatMessage(OpenAIRequest):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None


class RagRequest(OpenAIRequest):
    question: StrictStr
    pipeline: StrictStr | None = None
