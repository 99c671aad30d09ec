from dataclasses import dataclass

import pytest

from orthrus_rag.engine import SamplingParams
from orthrus_rag.engine.request import Usage
from orthrus_rag.rag import EngineReasoner


@dataclass
class FakeGenerateOutput:
    text: str
    usage: Usage


class ChatTokenizer:
    def apply_chat_template(self, messages, tokenize, add_generation_prompt=False, continue_final_message=False):
        assert tokenize is False
        text = "".join(f"<{m['role']}>{m['content']}" + ("" if continue_final_message and m is messages[-1] else "</>")
                       for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")


class FakeEngine:
    tokenizer = ChatTokenizer()

    def __init__(self):
        self.prompts = []

    async def generate(self, prompt, params):
        self.prompts.append((prompt, params))
        return FakeGenerateOutput(" Paris", Usage(7, 2, cached_tokens=4))


async def test_text_prompt_goes_through_the_chat_template():
    engine = FakeEngine()
    params = SamplingParams(max_tokens=5)
    assert await EngineReasoner(engine).reason("Capital of France?", params) == " Paris"
    assert engine.prompts == [("<user>Capital of France?</><assistant>", params)]


async def test_final_assistant_message_is_continued():
    engine = FakeEngine()
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "Step one.\n"}]
    await EngineReasoner(engine).reason(messages, SamplingParams())
    assert engine.prompts[0][0] == "<user>Q</><assistant>Step one.\n"


async def test_without_chat_template_messages_are_joined():
    engine = FakeEngine()
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    await EngineReasoner(engine, use_chat_template=False).reason(messages, SamplingParams())
    assert engine.prompts[0][0] == "Q\nA"


async def test_usage_is_reported():
    out = await EngineReasoner(FakeEngine()).reason_with_usage("Q", SamplingParams())
    assert (out.text, out.prompt_tokens, out.completion_tokens, out.cached_tokens) == (" Paris", 7, 2, 4)


@pytest.mark.parametrize("prompt", [[], [{"content": "no role"}], 42])
async def test_bad_prompts_are_rejected(prompt):
    with pytest.raises(TypeError):
        await EngineReasoner(FakeEngine()).reason(prompt, SamplingParams())


def test_real_chat_template_continues_the_reasoning(tokenizer):
    class Engine:
        pass
    Engine.tokenizer = tokenizer
    messages = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "One.\n"}]
    text = EngineReasoner(Engine()).render(messages)
    assert text.endswith("One.\n") and "Q?" in text
    assert EngineReasoner(Engine()).render("Q?").rstrip().endswith("assistant")


@pytest.mark.parametrize("messages", [
    [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Q?"}],
    [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "1. One.\n2."}],
])
def test_the_chat_endpoint_and_the_reasoner_render_alike(tokenizer, messages):
    from orthrus_rag.serving.requests import ChatMessage
    from orthrus_rag.serving.routes.chat import render_chat

    class Engine:
        pass
    Engine.tokenizer = tokenizer
    served = render_chat(tokenizer, [ChatMessage(**m) for m in messages])
    assert served == EngineReasoner(Engine()).render(messages)
    assert "Be brief." in served or served.endswith("1. One.\n2.")
    assert "developer" not in served


def test_token_spans_cover_each_passage_found_in_order(tokenizer):
    from orthrus_rag.rag.reasoner import token_spans

    passages = ["Paris is the capital and largest city of France.", "The Seine flows through Paris.",
                "not in the prompt"]
    text = f"Answer from these.\n[1] Paris: {passages[0]}\n[2] Seine: {passages[1]}\nQuestion: where?"
    ids, spans = token_spans(tokenizer, text, passages)
    assert ids == tokenizer.encode(text) and len(spans) == 2 and spans[0][1] <= spans[1][0]
    for (start, end), passage in zip(spans, passages):
        inside = tokenizer.decode(ids[start:end])
        assert inside.strip() in passage and len(inside) >= len(passage) - 8  # all but a boundary word at most


async def test_passages_go_as_token_spans_only_when_asked(tokenizer):
    class Engine(FakeEngine):
        pass

    Engine.tokenizer = tokenizer
    plain, spans = Engine(), Engine()
    passage = "Paris is the capital and largest city of France."
    prompt = f"Passages:\n[1] {passage}\nWhat is the capital of France?"
    await EngineReasoner(plain, use_chat_template=False).reason_with_usage(prompt, SamplingParams(), [passage])
    await EngineReasoner(spans, use_chat_template=False, passage_spans=True).reason_with_usage(
        prompt, SamplingParams(), [passage])
    (text, params), = plain.prompts
    (ids, reused), = spans.prompts
    assert text == prompt and params.passage_spans == []
    assert ids == tokenizer.encode(prompt) and len(reused.passage_spans) == 1
