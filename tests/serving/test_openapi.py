"""The server against its own OpenAPI schema: schemathesis sends schema-valid and schema-breaking requests to every
API operation on the tiny models and checks that no answer is a 5xx, that every non-2xx carries an OpenAI error
body, and that status codes, content types and bodies are the ones the schema declares."""
from __future__ import annotations

import copy

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode, checks

from orthrus_rag.engine import PoolingParams, SamplingParams
from orthrus_rag.rag import Answer
from orthrus_rag.serving import ServerSettings
from orthrus_rag.serving.errors import ErrorBody, RagInputError

EXAMPLES = 100  # per operation and generation mode (schema-valid, schema-breaking): the README quotes this figure
MAX_TOKENS = 4  # the fuzzed bodies generate at most this many tokens: the run stays short on two cores
MIN_TIMEOUT_S = 60.0  # the fuzzed bodies' own deadlines are at least this long
OPERATIONS = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/rag", "/v1/models", "/health")


def engine_rag(engine):
    """A RAG callable that runs the engine: an embedding of the question, then a short generation."""

    async def answer(question: str, pipeline: str | None) -> Answer:
        if pipeline not in (None, "standard_rag"):
            raise RagInputError(f"unknown pipeline {pipeline!r}; this server runs ['standard_rag']", "pipeline")
        await engine.embed(question, PoolingParams())
        out = await engine.generate(question, SamplingParams(max_tokens=MAX_TOKENS))
        return Answer(question, out.text)

    return answer


def capped(raw: dict) -> dict:
    """The published schema with `max_tokens` capped for generation, so that fuzzing stays fast, and `timeout` at
    least MIN_TIMEOUT_S, so that a schema-valid request is never answered 504 by its own deadline (tested on its
    own in test_reliability.py); nothing else."""
    raw = copy.deepcopy(raw)
    for model in raw["components"]["schemas"].values():
        for name in ("max_tokens", "max_completion_tokens"):
            for option in model.get("properties", {}).get(name, {}).get("anyOf", []):
                if option.get("type") == "integer":
                    option["maximum"] = MAX_TOKENS
        for option in model.get("properties", {}).get("timeout", {}).get("anyOf", []):
            if option.get("type") == "number":
                option.pop("exclusiveMinimum", None)
                option["minimum"] = MIN_TIMEOUT_S
    return raw


@pytest.fixture(scope="module")
def fuzzed_engine(make_engine):
    """An engine of its own: a request that stopped it would fail this test, not the rest of the suite."""
    engine = make_engine()
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def fuzzed_server(serve_app, fuzzed_engine):
    """The app under uvicorn on a loopback port, as it is deployed."""
    settings_ = ServerSettings(default_max_tokens=MAX_TOKENS, max_body_bytes=1 << 20)
    with serve_app(fuzzed_engine, settings_, engine_rag(fuzzed_engine)) as running:
        yield running


@pytest.fixture(scope="module")
def published(fuzzed_server) -> dict:
    return httpx.get(f"{fuzzed_server.url}/openapi.json", timeout=30).json()


@pytest.fixture(scope="module")
def api_schemas(published) -> dict:
    """Schema-valid requests come from the capped schema; schema-breaking ones from the published schema, since a
    value that breaks only a cap (max_tokens 5, timeout 1 s) is valid and rightly answered."""
    return {mode: schemathesis.openapi.from_dict(raw).include(path=list(OPERATIONS))
            for mode, raw in (("positive", capped(published)), ("negative", published))}


def openai_error_body(ctx, response, case) -> None:
    """Every non-2xx answer is `{"error": {"message", "type", "param", "code"}}` with a message."""
    if response.status_code < 300:
        return
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert ErrorBody.model_validate(body).error.message, body


CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
          checks.response_schema_conformance, checks.negative_data_rejection, openai_error_body]
FUZZED = [(path, method, mode) for path, method in [(p, "POST") for p in OPERATIONS[:4]] + [(p, "GET") for p in
                                                                                            OPERATIONS[4:]]
          for mode in ("positive", "negative") if method == "POST" or mode == "positive"]  # a GET takes no input


@pytest.mark.parametrize("path,method,mode", FUZZED)
def test_api_conforms_to_its_schema(api_schemas, fuzzed_server, path, method, mode):
    strategy = api_schemas[mode][path][method].as_strategy(generation_mode=GenerationMode(mode))
    answered: list[int] = []

    @given(case=strategy)
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    def fuzz(case) -> None:
        answered.append(case.call_and_validate(base_url=fuzzed_server.url, checks=CHECKS).status_code)
        assert fuzzed_server.engine._thread.is_alive(), "a request stopped the engine loop"

    fuzz()
    print(f"{method} {path} {mode}: {len(answered)} requests, statuses {sorted(set(answered))}")
    assert answered


def test_schema_documents_errors_and_no_422(published):
    for path in OPERATIONS:
        for operation in published["paths"][path].values():
            codes = set(operation["responses"])
            assert "422" not in codes and "503" in codes, (path, codes)
            if path.startswith("/v1/") and path != "/v1/models":
                assert {"200", "400", "401", "413", "429", "503"} <= codes, (path, codes)
    assert "HTTPValidationError" not in published["components"]["schemas"]
    completion = published["components"]["schemas"]["CompletionRequest"]["properties"]
    seed = completion["seed"]["anyOf"][0]
    assert (seed["type"], seed["minimum"], seed["exclusiveMaximum"]) == ("integer", 0, 2**64)
    stream = published["paths"]["/v1/completions"]["post"]["responses"]["200"]["content"]
    assert set(stream) == {"application/json", "text/event-stream"}


def test_only_request_bodies_take_a_timeout_and_stop_is_bounded(published):
    schemas = published["components"]["schemas"]
    for name in ("ChatMessage", "StreamOptions", "TextPart"):  # nested objects: a `timeout` there would be ignored
        assert "timeout" not in schemas[name]["properties"], name
    for name in ("ChatCompletionRequest", "CompletionRequest", "EmbeddingRequest", "RagRequest"):
        assert "timeout" in schemas[name]["properties"], name
    stop = schemas["CompletionRequest"]["properties"]["stop"]["anyOf"]
    assert {"type": "string", "minLength": 1, "maxLength": 256} in stop
    assert next(s for s in stop if s.get("type") == "array")["maxItems"] == 4
