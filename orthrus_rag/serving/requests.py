"""Request bodies, in the OpenAI API's shapes (unknown fields are ignored, as OpenAI clients send extras).

Types are strict (a string is never read as a number, nor a number as a string) and every type and range the
server enforces is declared here, so the OpenAPI schema at /openapi.json says which bodies are accepted. What the
schema cannot say is answered with a 400 naming the field: an input that is blank, longer than the context or
holds token ids past the vocabulary, an unknown model, a `dimensions` other than the model's.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

MAX_INPUTS = 2048  # embedding inputs per request, as in the OpenAI API
MAX_K = 50  # passages per retrieval a request may ask for
MAX_STEPS = 16  # reasoning steps a request may ask for
SEED_END = 2**64  # seeds are unsigned 64-bit integers; an exclusive bound, exact even as a JSON double
MAX_STOP = 4  # stop strings per request, as in the OpenAI API (the engine checks each after every token)
MAX_STOP_CHARS = 256  # characters per stop string (a stream holds back that much text while a stop may be starting)


def _unicode(value: str) -> str:
    """JSON can spell a lone UTF-16 surrogate ("\\ud800"), which is no Unicode text: refuse it here."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"text holds a lone UTF-16 surrogate at character {err.start}; "
                         "send valid Unicode text") from None
    return value


Text = Annotated[str, AfterValidator(_unicode)]
StopText = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS), AfterValidator(_unicode)]
TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]  # ids past the vocabulary: a 400
Count = Annotated[int, Field(ge=1)]


class OpenAIObject(BaseModel):
    """A JSON object of a request body, a request itself or one nested in it (a message, a content part)."""

    model_config = ConfigDict(extra="ignore", strict=True)


class OpenAIRequest(OpenAIObject):
    """A request body: what every route's request may send."""

    timeout: float | None = Field(None, gt=0, allow_inf_nan=False,
                                  description="extension: seconds this request may take (server.request_timeout_s "
                                              "still bounds it); past it the request is stopped and answered 504")


class EmbeddingRequest(OpenAIRequest):
    input: (Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_INPUTS)] | TokenIds
            | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_INPUTS)])
    model: Text | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Count | None = Field(None, description="must equal the model's own dimension (no truncation)")
    truncate_prompt_tokens: Count | None = Field(None, description="extension: embed only each input's first N tokens")
    user: Text | None = None


class StreamOptions(OpenAIObject):
    include_usage: bool = False


class SamplingRequest(OpenAIRequest):
    """Fields shared by completions and chat completions."""

    model: Text | None = None
    max_tokens: Count | None = Field(None, description="the prompt plus max_tokens must fit the context length; null: "
                                                       "server.default_max_tokens, or the room the prompt leaves in "
                                                       "the context if that is less")
    temperature: float | None = Field(None, ge=0, allow_inf_nan=False, description="0 is greedy; null is 1.0")
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="extension: keep the k likeliest tokens; 0 switches the filter off")
    seed: int | None = Field(None, ge=0, lt=SEED_END)
    stop: StopText | Annotated[list[StopText], Field(max_length=MAX_STOP)] | None = Field(
        None, description=f"up to {MAX_STOP} strings of up to {MAX_STOP_CHARS} characters each")
    n: int = Field(1, ge=1, le=1, description="one choice per request")
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # extension: keep generating past the end-of-sequence token
    logprobs: Literal[False, 0] | None = Field(None, description="not supported: unset, false or 0")
    user: Text | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(SamplingRequest):
    prompt: (Text | TokenIds | Annotated[list[Text], Field(min_length=1, max_length=1)]
             | Annotated[list[TokenIds], Field(min_length=1, max_length=1)]) = Field(
        description="one prompt: text or token ids, possibly as a one-element list")
    echo: Literal[False] = Field(False, description="not supported: must be false")
    best_of: Literal[1] | None = Field(None, description="not supported beyond 1")
    suffix: Annotated[Text, Field(max_length=0)] | None = Field(None, description="not supported: unset or empty")


class TextPart(OpenAIObject):
    type: Literal["text"]
    text: Text


class ChatMessage(OpenAIObject):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Count | None = Field(None, description="takes precedence over max_tokens")


class RagRequest(OpenAIRequest):
    question: Text = Field(description="a non-blank question")
    pipeline: Text | None = Field(None, description="one of the server's pipelines; null: its default")
    stream: bool = Field(False, description="true: server-sent events of the trace as it happens (see the "
                                            "text/event-stream response)")
    k: int | None = Field(None, ge=1, le=MAX_K, description="passages per retrieval, for this request only (where "
                                                             "the pipeline has this setting); null: the pipeline's")
    max_steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="reasoning steps at most, for this request "
                                                                        "only (where the pipeline has this setting)")
    example: Text | None = Field(None, description="with stream: an example id from GET /v1/rag/examples; the "
                                                   "answer event then scores the answer against its gold")

    def overrides(self) -> dict[str, int]:
        """The pipeline settings this request changes."""
        return {name: value for name, value in (("k", self.k), ("max_steps", self.max_steps)) if value is not None}
