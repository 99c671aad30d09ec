"""Models served elsewhere: `RemoteEngine` is the engine as the pipelines see it (`EngineLike`), with generation,
embedding or both sent to OpenAI-compatible servers (`orthrus-rag-serve`, vLLM, TEI, ...) and the rest run on the
local engine.

Generation posts the prompt to `/completions`, rendered here with the generator's own chat template (so a remote
run sends the very text a local one computes on), streamed, with the same sampling settings and stop strings; the
deltas reach a live trace as the local engine's do. Embedding posts to `/embeddings`. Token counts come from the
server's `usage`. A timeout, a dropped connection, a 429 or a 5xx is retried (`retries` times, backing off); any
other failure is a `RemoteError` naming the server and what it answered.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from orthrus_rag.engine import (EmbedOutput, EngineLike, GenerateOutput, PoolingParams, RequestTimings,
                                SamplingParams, Usage)
from orthrus_rag.engine.observe import OBSERVER
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.protocol import Prompt

RETRY_STATUS = {408, 429, 500, 502, 503, 504}
logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs every request at INFO: a run makes thousands
BACKOFF_S = 0.5  # the first retry's wait; doubled for each next one


@dataclass(frozen=True)
class EndpointSettings:
    """Where a model runs when not in this process (the `model` and `embedder` groups' keys besides `name`)."""

    endpoint: str | None = None  # base URL of an OpenAI-compatible API (http://host:port/v1); None: the local engine
    api_key_env: str = "OPENAI_API_KEY"  # environment variable holding the server's API key (sent when it is set)
    timeout_s: float = 300.0  # seconds one HTTP request may take (a streamed one: between two chunks)
    retries: int = 2  # further tries after a timeout, a lost connection, a 429 or a 5xx

    def __post_init__(self) -> None:
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must be an http:// or https:// URL (such as http://127.0.0.1:8000/v1), "
                             f"got {self.endpoint!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {self.retries!r}")


class RemoteError(RuntimeError):
    """A server that could not be reached, or answered with an error; the message names it and what it said."""


@dataclass
class Endpoint:
    """One OpenAI-compatible server and the model asked for there; counts what it was sent and answered."""

    settings: EndpointSettings
    model: str
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("requests", "retries", "prompt_tokens", "completion_tokens"), 0))
    _client: httpx.AsyncClient | None = None
    _loop: asyncio.AbstractEventLoop | None = None  # the loop `_client` belongs to

    @property
    def url(self) -> str:
        return self.settings.endpoint.rstrip("/")

    def headers(self) -> dict[str, str]:
        key = os.environ.get(self.settings.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def client(self) -> httpx.AsyncClient:
        """The client of the running event loop: made on first use in each loop (a client's connections belong to
        the loop that opened them; a server builds its index in one loop and answers in another)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client, self._loop = httpx.AsyncClient(timeout=self.settings.timeout_s, headers=self.headers()), loop
        return self._client

    def check(self) -> None:
        """Fail with one line unless the server answers `GET /models` and lists this model (a local folder's path
        or, as orthrus-rag-serve names it, its last part: the name sent from then on)."""
        try:
            answer = httpx.get(f"{self.url}/models", headers=self.headers(), timeout=min(self.settings.timeout_s, 30))
        except httpx.HTTPError as error:
            raise RemoteError(f"{self.url} cannot be reached ({error}): start the server, or fix the endpoint") \
                from error
        if answer.status_code != 200:
            raise RemoteError(f"{self.url}/models answered {answer.status_code}: {_message(answer)}")
        try:
            served = [m.get("id") for m in answer.json().get("data", [])]
        except (ValueError, AttributeError) as error:
            raise RemoteError(f"{self.url}/models answered no model list: is this an OpenAI-compatible API?") \
                from error
        for name in dict.fromkeys((self.model, Path(self.model).name)):  # a folder: by its path, or its last part
            if name in served:
                self.model = name
                return
        raise RemoteError(f"{self.url} serves {served}, not {self.model!r}: name a served model, or start the "
                          f"server with this name (vLLM: --served-model-name {self.model})")

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The JSON answer to `body`, retried as the module says."""
        async with self.stream(path, body) as answer:
            try:
                return json.loads(await answer.aread())
            except (httpx.HTTPError, ValueError) as error:
                raise RemoteError(f"{answer.url}: no JSON answer ({type(error).__name__} {error})") from error

    @contextlib.asynccontextmanager
    async def stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[httpx.Response]:
        """`async with endpoint.stream(path, body) as response`: a 200 response, open, after the retries it took
        (what goes wrong after it opened is not retried: part of it may have been used)."""
        url, opened = f"{self.url}{path}", False
        self.counters["requests"] += 1
        for attempt in itertools.count():
            last = attempt >= self.settings.retries
            try:
                async with self.client().stream("POST", url, json=body) as response:
                    if response.status_code == 200:
                        opened = True
                        yield response
                        return
                    await response.aread()
                    if last or response.status_code not in RETRY_STATUS:
                        raise RemoteError(f"{url} answered {response.status_code}: {_message(response)}")
            except httpx.TransportError as error:
                if opened or last:
                    raise RemoteError(f"{url}: {type(error).__name__} {error} after {attempt + 1} tries") \
                        from error
            self.counters["retries"] += 1
            await asyncio.sleep(BACKOFF_S * 2 ** attempt)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def discard(self) -> None:
        """Close the client from inside a running loop (in the background); without one, drop it with its loop."""
        if self._client is None:
            return
        try:
            asyncio.get_running_loop().create_task(self.close())
        except RuntimeError:
            self._client = None


def _message(response: httpx.Response) -> str:
    """The error message of an OpenAI-style error body, else the body's start."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason_phrase


class RemoteEngine:
    """`EngineLike` over remote servers: generation on `generator` and embedding on `embedder` where given, the
    rest on `local`; `tokenizer` is the generator's (its chat template renders the prompts here)."""

    def __init__(self, tokenizer: Any, generator: Endpoint | None = None, embedder: Endpoint | None = None,
                 local: EngineLike | None = None):
        if (generator is None or embedder is None) and local is None:
            raise ValueError("a RemoteEngine without both endpoints needs a local engine for the other part")
        self._tokenizer, self.generator, self.embedder, self.local = tokenizer, generator, embedder, local
        self._ids = itertools.count()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def generate(self, prompt: Prompt, params: SamplingParams | None = None) -> GenerateOutput:
        if self.generator is None:
            return await self.local.generate(prompt, params)
        params = params or SamplingParams()
        params.validate()
        request_id, observer = f"remote-{next(self._ids)}", OBSERVER.get()
        timings = RequestTimings(arrival=time.perf_counter())
        text, finish, usage = [], "length", {}
        async with self.generator.stream("/completions", completion_body(self.generator.model, prompt, params)) as r:
            timings.first_scheduled = time.perf_counter()
            async for chunk in _events(r):
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    if choice.get("text"):
                        timings.first_token = timings.first_token or time.perf_counter()
                        text.append(choice["text"])
                        if observer is not None:
                            observer(StepOutput(request_id, delta_text=choice["text"]))
                    finish = choice.get("finish_reason") or finish
        timings.finished = time.perf_counter()
        out = GenerateOutput(request_id, "".join(text), [], "stop" if finish == "stop" else "length",
                             Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
                                   (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0), timings)
        self._count(self.generator, out.usage)
        if observer is not None:
            observer(StepOutput(request_id, finished=True, result=out))
        return out

    async def embed(self, input: Prompt, params: PoolingParams | None = None) -> EmbedOutput:
        if self.embedder is None:
            return await self.local.embed(input, params)
        params = params or PoolingParams()
        params.validate()
        timings = RequestTimings(arrival=time.perf_counter())
        body = {"model": self.embedder.model, "input": input, "encoding_format": "float",
                **({"truncate_prompt_tokens": params.truncate} if params.truncate else {})}
        timings.first_scheduled = time.perf_counter()
        answer = await self.embedder.post("/embeddings", body)
        timings.finished = time.perf_counter()
        vector = np.asarray(answer["data"][0]["embedding"], dtype=np.float32)
        if params.normalize:  # a server may or may not normalise; a unit vector is unchanged
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        tokens = (answer.get("usage") or {}).get("prompt_tokens", 0)
        self._count(self.embedder, Usage(tokens))
        out = EmbedOutput(f"remote-{next(self._ids)}", vector, tokens, timings)
        if (observer := OBSERVER.get()) is not None:
            observer(StepOutput(out.request_id, finished=True, result=out))
        return out

    @staticmethod
    def _count(endpoint: Endpoint, usage: Usage) -> None:
        endpoint.counters["prompt_tokens"] += usage.prompt_tokens
        endpoint.counters["completion_tokens"] += usage.completion_tokens

    def stats(self) -> dict[str, Any]:
        """The local engine's counters, and under `remote` each endpoint's URL, model and counts."""
        remote = {part: {"url": e.url, "model": e.model, **e.counters}
                  for part, e in (("generator", self.generator), ("embedder", self.embedder)) if e is not None}
        return {**(self.local.stats() if self.local is not None else {}), "remote": remote}

    def shutdown(self) -> None:
        for endpoint in filter(None, (self.generator, self.embedder)):
            endpoint.discard()
        if self.local is not None:
            self.local.shutdown()


def completion_body(model: str, prompt: Prompt, params: SamplingParams) -> dict[str, Any]:
    """A streamed `/completions` request for these sampling settings (extensions only where they are set)."""
    body = {"model": model, "prompt": prompt, "max_tokens": params.max_tokens, "temperature": params.temperature,
            "top_p": params.top_p, "stream": True, "stream_options": {"include_usage": True}}
    optional = {"seed": params.seed, "stop": params.stop or None, "top_k": params.top_k or None,
                "stop_token_ids": params.stop_token_ids or None, "ignore_eos": params.ignore_eos or None}
    return body | {key: value for key, value in optional.items() if value is not None}


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of a server-sent-events stream, up to `data: [DONE]`."""
    try:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                return
            event = json.loads(data)
            if "error" in event:
                raise RemoteError(f"{response.url} failed while streaming: {event['error'].get('message', event)}")
            yield event
    except (httpx.HTTPError, json.JSONDecodeError) as error:
        raise RemoteError(f"{response.url}: the stream broke off ({type(error).__name__} {error})") from error
