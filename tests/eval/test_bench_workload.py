from collections import Counter

import pytest

from orthrus_rag.eval.bench.workload import VOCAB, make_requests


def test_same_seed_same_requests_other_seed_other_requests():
    a = make_requests(40, 0.5, seed=3, gen_prompt_tokens=20, embed_tokens=10)
    assert a == make_requests(40, 0.5, seed=3, gen_prompt_tokens=20, embed_tokens=10)
    assert a != make_requests(40, 0.5, seed=4, gen_prompt_tokens=20, embed_tokens=10)


@pytest.mark.parametrize("n, share, embeds", [(40, 0.5, 20), (30, 0.1, 3), (30, 0.9, 27), (7, 0.0, 0), (7, 1.0, 7),
                                              (10, 0.25, 2)])
def test_embed_share_is_exact(n, share, embeds):
    kinds = Counter(r.kind for r in make_requests(n, share, seed=0, gen_prompt_tokens=5, embed_tokens=5))
    assert kinds["embed"] == embeds and kinds["generate"] == n - embeds


def test_kinds_are_mixed_not_blocked():
    kinds = [r.kind for r in make_requests(40, 0.5, seed=0, gen_prompt_tokens=5, embed_tokens=5)]
    assert kinds[:20] != ["embed"] * 20 and kinds[:20] != ["generate"] * 20


def test_lengths_in_words_and_vocabulary():
    requests = make_requests(20, 0.5, seed=1, gen_prompt_tokens=12, embed_tokens=5)
    for r in requests:
        words = r.text.rstrip(".").lower().split()
        assert len(words) == (5 if r.kind == "embed" else 12)
        assert set(words) <= set(VOCAB)


def test_vocabulary_words_are_single_tokens(tokenizer):
    multi = [w for w in VOCAB if len(tokenizer.encode(" " + w, add_special_tokens=False)) != 1]
    assert len(multi) <= len(VOCAB) // 20, multi


def test_bad_share_rejected():
    with pytest.raises(ValueError):
        make_requests(4, 1.5, seed=0, gen_prompt_tokens=5, embed_tokens=5)
