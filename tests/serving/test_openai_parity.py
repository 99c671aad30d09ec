"""Through the real openai client, the server returns exactly what the engine computes for the same input."""
from __future__ import annotations

import base64

import numpy as np
import pytest
from openai import AsyncOpenAI

from orthrus_rag.engine import PoolingParams, SamplingParams

PROMPT = "The capital of the invented country is"
MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who wrote the anthem?"}]


@pytest.fixture
def client(server):
    return AsyncOpenAI(base_url=server.api, api_key="unused", max_retries=0, timeout=60)


def chat_prompt(engine) -> str:
    return engine.tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)


async def test_models_lists_generator_and_embedder(client, server):
    ids = {m.id for m in (await client.models.list()).data}
    assert ids == {server.state.generator_name, server.state.embedder_name}


async def test_embeddings_equal_engine_vectors_float_and_base64(client, server):
    texts = ["first passage about rivers", "a second, longer passage about mountains and lakes"]
    expected = [(await server.engine.embed(t, PoolingParams())).embedding for t in texts]
    floats = await client.embeddings.create(input=texts, model=server.state.embedder_name, encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1]
    got_floats = [np.asarray(d.embedding, dtype=np.float32) for d in floats.data]
    for got, want in zip(got_floats, expected):  # one input alone vs two padded together: float rounding only
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    raw = await client.embeddings.with_raw_response.create(input=texts, model=server.state.embedder_name,
                                                           encoding_format="base64")
    for item, want in zip(raw.http_response.json()["data"], expected):
        np.testing.assert_allclose(np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4"), want,
                                   rtol=0, atol=1e-6)
    want_tokens = sum([(await server.engine.embed(t)).num_tokens for t in texts])
    assert floats.usage.prompt_tokens == floats.usage.total_tokens == want_tokens


async def test_embeddings_token_ids_and_backbone_model(client, server):
    ids = server.engine.tokenizer.encode("token ids in")
    want = (await server.engine.embed(ids, PoolingParams(model="backbone"))).embedding
    got = await client.embeddings.create(input=[ids, ids], model=server.state.generator_name)
    assert len(got.data) == 2 and got.model == server.state.generator_name
    np.testing.assert_allclose(np.asarray(got.data[1].embedding, dtype=np.float32), want, rtol=0, atol=1e-6)
    assert len(want) == server.engine.embedding_dim("backbone")


async def test_embeddings_truncate_prompt_tokens_embeds_the_first_tokens(client, server):
    text = "a passage long enough to be cut after its first few tokens by the server"
    ids = server.engine.tokenizer.encode(text)
    want = (await server.engine.embed(ids[:5], PoolingParams(model="backbone"))).embedding
    got = await client.embeddings.create(input=text, model=server.state.generator_name,
                                         extra_body={"truncate_prompt_tokens": 5})
    np.testing.assert_allclose(np.asarray(got.data[0].embedding, dtype=np.float32), want, rtol=0, atol=1e-6)
    assert got.usage.prompt_tokens == 5


async def test_completion_greedy_equals_engine(client, server):
    want = await server.engine.generate(PROMPT, SamplingParams(max_tokens=12, temperature=0.0))
    got = await client.completions.create(model=server.state.generator_name, prompt=PROMPT, max_tokens=12,
                                          temperature=0)
    assert got.object == "text_completion" and got.id.startswith("cmpl-") and got.created > 0
    assert got.choices[0].text == want.text and got.choices[0].finish_reason == want.finish_reason
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (want.usage.prompt_tokens,
                                                                      want.usage.completion_tokens)
    assert got.usage.total_tokens == want.usage.total_tokens


async def test_chat_greedy_equals_engine_on_templated_prompt(client, server):
    want = await server.engine.generate(chat_prompt(server.engine), SamplingParams(max_tokens=10, temperature=0.0))
    got = await client.chat.completions.create(model=server.state.generator_name, messages=MESSAGES,
                                               max_completion_tokens=10, temperature=0)
    assert got.object == "chat.completion"
    assert got.choices[0].message.role == "assistant" and got.choices[0].message.content == want.text
    assert got.usage.prompt_tokens == want.usage.prompt_tokens
    assert got.usage.completion_tokens == want.usage.completion_tokens


async def test_chat_stream_joins_to_same_text_with_usage_last(client, server):
    want = await server.engine.generate(chat_prompt(server.engine), SamplingParams(max_tokens=10, temperature=0.0))
    stream = await client.chat.completions.create(model=server.state.generator_name, messages=MESSAGES,
                                                  max_tokens=10, temperature=0, stream=True,
                                                  stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want.text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == want.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == want.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


async def test_completion_stream_joins_to_same_text(client, server):
    want = await server.engine.generate(PROMPT, SamplingParams(max_tokens=12, temperature=0.0, stop=["e"]))
    stream = await client.completions.create(model=server.state.generator_name, prompt=PROMPT, max_tokens=12,
                                             temperature=0, stop="e", stream=True,
                                             stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want.text
    assert chunks[-1].usage.total_tokens == want.usage.total_tokens


async def test_seeded_sampling_is_reproducible(client, server):
    args = dict(model=server.state.generator_name, prompt=PROMPT, max_tokens=8, temperature=1.0, top_p=0.9, seed=7)
    first = await client.completions.create(**args)
    second = await client.completions.create(**args)
    assert first.choices[0].text == second.choices[0].text
