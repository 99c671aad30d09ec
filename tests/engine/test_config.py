"""EngineConfig checks itself when made: a bad runtime value is an InvalidRequestError naming its key, before any
model loads."""
import dataclasses
import math

import pytest

from orthrus_rag.engine import EngineConfig, InvalidRequestError

BAD = [
    (dict(attention_backend="fast"), "attention_backend", "must be auto or one of"),
    (dict(policy="fastest"), "policy", r"must be one of .*'adaptive'.*got 'fastest'"),
    (dict(num_threads=0), "num_threads", "must be >= 1, or null"),
    (dict(num_threads=-1), "num_threads", "must be >= 1, or null"),
    (dict(max_model_len=-8), "max_model_len", "must be >= 1, or null"),
    (dict(device="gpu"), "device", "must be auto, cpu, cuda or cuda:N"),
    (dict(device="cuda:x"), "device", "must be auto, cpu, cuda or cuda:N"),
    (dict(embedder_token_cost=-1.0), "embedder_token_cost", "must be > 0"),
    (dict(embedder_token_cost=0.0), "embedder_token_cost", "must be > 0"),
    (dict(embedder_token_cost=math.inf), "embedder_token_cost", "must be > 0"),
    (dict(weights={"embeds": 5, "generation": 1}), "weights", r"takes the keys embed and generate only; got \['emb"),
]


@pytest.mark.parametrize("overrides,key,message", BAD)
def test_a_bad_value_names_its_key(overrides, key, message):
    with pytest.raises(InvalidRequestError, match=f"runtime.{key} {message}") as error:
        EngineConfig(generator="/no/such/model", **overrides)  # the value fails, not the missing model
    assert error.value.param == key


def test_a_copy_with_a_bad_value_fails_too():
    with pytest.raises(InvalidRequestError, match="runtime.max_num_seqs must be >= 1"):
        dataclasses.replace(EngineConfig(), max_num_seqs=0)


@pytest.mark.parametrize("overrides", [dict(num_threads=None), dict(num_threads=1), dict(device="cpu"),
                                       dict(device="cuda"), dict(device="cuda:1"), dict(max_model_len=1),
                                       dict(embedder_token_cost=None), dict(embedder_token_cost=0.05),
                                       dict(weights={"embed": 3}), dict(weights={"embed": 1, "generate": 0})])
def test_good_values_pass(overrides):
    EngineConfig(**overrides)
