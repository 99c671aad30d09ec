"""A generation request is tokenised once, wherever its length is first needed, and gives what the engine gives."""
from __future__ import annotations

import pytest
from openai import AsyncOpenAI

from orthrus_rag.engine import SamplingParams

PROMPT = "The capital of the invented country is"
MESSAGES = [{"role": "user", "content": "Who wrote the anthem?"}]


@pytest.fixture
def client(server):
    return AsyncOpenAI(base_url=server.api, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture
def encodes(server, monkeypatch) -> list[str]:
    """The texts the generator's tokenizer encodes from here on (the route and the engine share it)."""
    tokenizer, seen = server.engine.tokenizer, []
    encode = tokenizer.encode

    def counted(text, *args, **kwargs):
        seen.append(text)
        return encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", counted)
    return seen


@pytest.mark.parametrize("max_tokens", [None, 5])
async def test_a_completion_is_tokenised_once(client, server, encodes, max_tokens):
    got = await client.completions.create(model=server.state.generator_name, prompt=PROMPT, temperature=0,
                                          max_tokens=max_tokens)
    assert encodes == [PROMPT]
    want = await server.engine.generate(PROMPT, SamplingParams(max_tokens=max_tokens or 16, temperature=0.0))
    assert got.choices[0].text == want.text and got.usage.prompt_tokens == want.usage.prompt_tokens


@pytest.mark.parametrize("stream", [False, True])
async def test_a_chat_without_max_tokens_is_tokenised_once(client, server, encodes, stream):
    got = await client.chat.completions.create(model=server.state.generator_name, messages=MESSAGES, temperature=0,
                                               stream=stream)
    text = "".join([c.choices[0].delta.content or "" async for c in got if c.choices]) if stream else (
        got.choices[0].message.content)
    assert len(encodes) == 1
    want = await server.engine.generate(encodes[0], SamplingParams(max_tokens=16, temperature=0.0))
    assert text == want.text


async def test_a_blank_prompt_without_max_tokens_is_refused_as_the_engine_refuses_it(client, server):
    from openai import BadRequestError

    with pytest.raises(BadRequestError, match="the input is empty; send at least one non-blank character"):
        await client.completions.create(model=server.state.generator_name, prompt="   ")


async def test_usage_says_how_much_of_the_prompt_the_prefix_cache_served(client, server):
    prompt = " ".join(f"river{i}" for i in range(60))  # several full KV blocks no other test sends
    first, second = [await client.completions.create(model=server.state.generator_name, prompt=prompt,
                                                     temperature=0, max_tokens=2) for _ in range(2)]
    block = server.engine.config.block_size
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < second.usage.prompt_tokens and cached % block == 0
    assert cached == (second.usage.prompt_tokens - 1) // block * block  # every full block but the last token's
