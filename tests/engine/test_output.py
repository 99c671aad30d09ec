"""Incremental detokenisation: the same text as a full decode, work per token bounded, stop strings on the tail."""
import pytest

from orthrus_rag.engine import SamplingParams
from orthrus_rag.engine.output import append_token, take_delta
from orthrus_rag.engine.request import RequestTimings
from orthrus_rag.engine.sequence import Sequence

TEXTS = ["Hello world, this is a plain sentence.", "naïve café — 世界 🙂 emoji and accents ümlaut",
         "def f(x):\n    return x  # code\n\n\tindent", "  leading spaces and   runs   of spaces"]


class CountingTokenizer:
    def __init__(self, tokenizer):
        self.tokenizer, self.longest = tokenizer, 0

    def decode(self, ids, **kwargs):
        self.longest = max(self.longest, len(ids))
        return self.tokenizer.decode(ids, **kwargs)


def feed(tokenizer, ids: list[int], params: SamplingParams) -> tuple[Sequence, list[str]]:
    seq = Sequence("r", "generate", [1], RequestTimings(0.0), 0, sampling=params)
    deltas = []
    for token in ids:
        seq.finish_reason = append_token(seq, token, tokenizer, eos_ids=set())  # as the scheduler records it
        deltas.append(take_delta(seq))
        if seq.finish_reason:
            break
    return seq, deltas


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_text_equals_full_decode(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    seq, deltas = feed(tokenizer, ids, SamplingParams(max_tokens=len(ids), ignore_eos=True))
    assert seq.text == tokenizer.decode(ids, skip_special_tokens=True)
    assert "".join(deltas) == seq.text and seq.finish_reason == "length"


def test_split_multibyte_characters_and_random_tokens(tokenizer):
    import random

    rng = random.Random(0)
    byte_tokens = [i for i in range(len(tokenizer)) if "\ufffd" in tokenizer.decode([i])][:200]
    ids = [rng.choice(byte_tokens) if rng.random() < 0.4 else rng.randrange(len(tokenizer)) for _ in range(300)]
    seq, deltas = feed(tokenizer, ids, SamplingParams(max_tokens=len(ids), ignore_eos=True))
    assert seq.text == tokenizer.decode(ids, skip_special_tokens=True)
    assert "".join(deltas) == seq.text


def test_work_per_token_does_not_grow_with_output(tokenizer):
    ids = tokenizer.encode(" ".join(TEXTS * 10), add_special_tokens=False)
    counting = CountingTokenizer(tokenizer)
    seq, _ = feed(counting, ids, SamplingParams(max_tokens=len(ids), ignore_eos=True))
    assert len(ids) > 200 and counting.longest <= 8
    assert seq.text == tokenizer.decode(ids, skip_special_tokens=True)


def test_stop_string_across_tokens_is_cut_and_never_streamed(tokenizer):
    text = "alpha beta gamma delta epsilon"
    ids = tokenizer.encode(text, add_special_tokens=False)
    seq, deltas = feed(tokenizer, ids, SamplingParams(max_tokens=len(ids), stop=["ma del"], ignore_eos=True))
    assert seq.finish_reason == "stop" and seq.text == "alpha beta gam"
    assert "".join(deltas) == seq.text


def test_stop_token_text_is_not_added(tokenizer):
    ids = tokenizer.encode("one two three", add_special_tokens=False)
    seq, deltas = feed(tokenizer, ids, SamplingParams(max_tokens=10, stop_token_ids=[ids[-1]]))
    assert seq.text == tokenizer.decode(ids[:-1]) and "".join(deltas) == seq.text


def test_stop_string_in_text_flushed_by_a_stop_token_is_cut(tokenizer):
    partial = next(i for i in range(len(tokenizer)) if tokenizer.convert_ids_to_tokens(i).startswith("\u0120")
                   and tokenizer.decode([i]).endswith("\ufffd") and tokenizer.decode([i]).strip("\ufffd"))
    ids = tokenizer.encode("one two", add_special_tokens=False) + [partial]  # " " + half a character: held back
    stop_id = tokenizer.encode(" three", add_special_tokens=False)[0]
    seq, deltas = feed(tokenizer, ids + [stop_id], SamplingParams(max_tokens=10, stop=["two "],
                                                                  stop_token_ids=[stop_id]))
    assert seq.finish_reason == "stop" and seq.text == "one " and "".join(deltas) == seq.text
