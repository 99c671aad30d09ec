"""A tiny random Qwen2 through the engine: with what Qwen2.5 adds to a Llama (q/k/v biases, an untied output
layer, RoPE theta 1e6), greedy tokens equal transformers `generate` and backbone embeddings its pooled hidden states
in float32, with chunked prefills, decodes and embedding rows in the same steps."""
import pytest
import torch

from orthrus_rag.engine import LLMEngine, PoolingParams, SamplingParams
from tests.engine.conftest import PROMPTS, assert_clean, hf_greedy, hf_pool, run_all, tiny_config

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory, tokenizer):
    """(folder, model): 2 layers, 4 query and 2 KV heads of 32, random non-zero q/k/v biases, untied head."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                         tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):  # initialised to zero: make them count
                param.normal_(0, 1.0)
    folder = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def test_tiny_qwen2_has_what_the_test_is_about(tiny_qwen2):
    _, model = tiny_qwen2
    attention = model.model.layers[0].self_attn
    assert all(getattr(attention, p).bias.abs().sum() > 0 for p in ("q_proj", "k_proj", "v_proj"))
    assert attention.o_proj.bias is None
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)


def test_tiny_qwen2_greedy_and_pooling_match_transformers(tiny_qwen2, tokenizer):
    folder, model = tiny_qwen2
    engine = LLMEngine(tiny_config(folder, max_num_batched_tokens=32))
    prompts = [tokenizer(p).input_ids for p in PROMPTS]
    for i, ids in enumerate(prompts):
        engine.add_request(f"g{i}", ids, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
        engine.add_request(f"e{i}", ids, PoolingParams(model="backbone"))
    results = run_all(engine)
    assert engine.get_stats()["mixed_steps"] > 0
    want = [hf_greedy(model, ids, MAX_TOKENS) for ids in prompts]
    assert [results[f"g{i}"].token_ids for i in range(len(prompts))] == want
    for i, ids in enumerate(prompts):
        vector = torch.as_tensor(results[f"e{i}"].embedding)
        torch.testing.assert_close(vector, hf_pool(model, ids, "mean", True), atol=1e-5, rtol=0)
    assert_clean(engine)


def test_the_biases_change_the_tokens(tiny_qwen2, tokenizer):
    """The comparison above would see an engine that dropped the biases: without them the tokens differ."""
    _, model = tiny_qwen2
    ids = tokenizer(PROMPTS[1]).input_ids
    with_biases = hf_greedy(model, ids, MAX_TOKENS)
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith(".bias")}
    try:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(".bias"):
                    param.zero_()
        assert hf_greedy(model, ids, MAX_TOKENS) != with_biases
    finally:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name in saved:
                    param.copy_(saved[name])
