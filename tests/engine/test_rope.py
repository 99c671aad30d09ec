"""Cached keys moved to another position equal a prefill at that position (float32, 1e-5), against transformers'
own Llama and Qwen2 model code."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, Qwen2Config

from orthrus_rag.engine.rope import KeyRotation, unmovable
from tests.conftest import tiny_llama_config


def tiny_model(kind: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "llama":
        config = tiny_llama_config(500, **overrides)
    else:
        config = Qwen2Config(vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **overrides)
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()


def kv_at(model, ids: list[int], first_position: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer K and V (tokens, kv_heads, head_dim) of a prefill of `ids` at positions from `first_position`."""
    cache = DynamicCache(config=model.config)
    positions = torch.arange(first_position, first_position + len(ids))[None]
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), position_ids=positions, past_key_values=cache, use_cache=True)
    return [(layer.keys[0].transpose(0, 1), layer.values[0].transpose(0, 1)) for layer in cache.layers]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("delta", [37, 300, -5])
def test_a_passage_moved_equals_a_prefill_at_its_new_position(kind, delta):
    model = tiny_model(kind)
    preamble, passage = list(range(10, 30)), list(range(100, 141))
    stored = kv_at(model, preamble + passage, first_position=5)
    fresh = kv_at(model, preamble + passage, first_position=5 + delta)  # the preamble moves with it
    rotate, span = KeyRotation(model), slice(len(preamble), None)
    for (k, v), (k_fresh, v_fresh) in zip(stored, fresh):
        assert not torch.allclose(k[span], k_fresh[span], atol=1e-3)  # a different position: other keys
        torch.testing.assert_close(rotate(k[span], delta), k_fresh[span], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v[span], v_fresh[span], atol=1e-5, rtol=1e-5)


def test_llama3_scaled_rope_moves_too():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 10000.0}
    model = tiny_model("llama", rope_parameters=scaling)
    ids = list(range(50, 90))
    (k, _), *_ = kv_at(model, ids, 0)
    (k_fresh, _), *_ = kv_at(model, ids, 200)
    torch.testing.assert_close(KeyRotation(model)(k, 200), k_fresh, atol=1e-5, rtol=1e-5)


def test_a_rope_that_changes_with_length_is_refused_with_the_reason():
    model = tiny_model("llama", rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    assert "dynamic" in unmovable(model)
    with pytest.raises(ValueError, match="cannot be moved"):
        KeyRotation(model)
