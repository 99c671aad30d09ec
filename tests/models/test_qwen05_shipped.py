"""Qwen2.5-Coder-0.5B-Instruct, assembled from six packages: the converted folder holds the GGUF's weights (q/k/v
biases, an untied output layer, RoPE theta 1e6) and its ChatML template, and the engine's greedy tokens equal
transformers `generate` in float32 and in bfloat16, on both CPU attention backends."""
import re

import pytest
import torch

from orthrus_rag.engine import EngineConfig, LLMEngine, PoolingParams, SamplingParams
from orthrus_rag.models import load_generator
from orthrus_rag.models.registry import SHIPPED, assemble_gguf
from orthrus_rag.rag.reasoner import apply_chat_template
from tests.engine.conftest import hf_greedy, run_all
from tests.models.conftest import QWEN05

pytestmark = pytest.mark.shipped

QUESTIONS = ["What is the capital of France?", "Name three colours.", "Who wrote Hamlet?", "What is 7 times 8?"]
TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def transformers_name(gguf_name: str) -> str:
    """llama.cpp's tensor name -> transformers' Qwen2 parameter name (written out here, not taken from
    transformers, so the check does not share the loader's mapping)."""
    stem, kind = gguf_name.rsplit(".", 1)
    layer = re.fullmatch(r"blk\.(\d+)\.(\w+)", stem)
    return f"model.layers.{layer[1]}.{LAYER[layer[2]]}.{kind}" if layer else f"{TOP[stem]}.{kind}"


@pytest.fixture(scope="module")
def gguf(qwen05_path, tmp_path_factory):
    return assemble_gguf(SHIPPED[QWEN05], tmp_path_factory.mktemp("qwen05-gguf"))


def chat(tokenizer, question: str) -> list[int]:
    return tokenizer(apply_chat_template(tokenizer, [{"role": "user", "content": question}]),
                     add_special_tokens=False).input_ids


def test_converted_weights_are_the_gguf_dequantised(qwen05_path, gguf):
    from gguf import GGUFReader, dequantize
    from safetensors.torch import load_file

    saved = load_file(str(qwen05_path / "model.safetensors"))
    tensors = GGUFReader(gguf).tensors
    assert len(tensors) == len(saved) == 291
    for tensor in tensors:
        name = transformers_name(tensor.name)
        want = torch.from_numpy(dequantize(tensor.data, tensor.tensor_type).copy())
        assert torch.equal(saved[name], want.reshape(saved[name].shape).to(saved[name].dtype)), name
    assert not torch.equal(saved["lm_head.weight"], saved["model.embed_tokens.weight"])  # untied head
    for proj in ("q_proj", "k_proj", "v_proj"):
        assert saved[f"model.layers.0.self_attn.{proj}.bias"].abs().sum() > 0


def test_config_tokenizer_and_chat_template_come_from_the_gguf(qwen05_path, gguf):
    from gguf import GGUFReader
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(qwen05_path)
    assert config.model_type == "qwen2" and not config.tie_word_embeddings and not config.use_sliding_window
    assert config.rope_parameters == {"rope_theta": 1_000_000.0, "rope_type": "default"}
    assert (config.num_hidden_layers, config.hidden_size, config.num_key_value_heads) == (24, 896, 2)
    assert str(config.dtype).removeprefix("torch.") in qwen05_path.name.replace("bf16", "bfloat16").replace(
        "f32", "float32")  # the folder's name records the dtype it stores
    tokenizer = AutoTokenizer.from_pretrained(qwen05_path)
    direct = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    for text in QUESTIONS + ["def fibonacci(n):\n    return", "Ünïcödé  spaces\tand 12345 numbers"]:
        assert tokenizer(text).input_ids == direct(text).input_ids
    field = GGUFReader(gguf).fields["tokenizer.chat_template"]
    assert tokenizer.chat_template == bytes(field.parts[field.data[0]]).decode()
    assert tokenizer.eos_token == "<|im_end|>"
    text = apply_chat_template(tokenizer, [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def reference(qwen05_path, request):
    """(dtype, tokenizer, chat prompts, transformers' greedy tokens for them)."""
    model, tokenizer = load_generator(QWEN05, dtype=request.param)
    prompts = [chat(tokenizer, q) for q in QUESTIONS]
    return request.param, tokenizer, prompts, [hf_greedy(model, ids, 16) for ids in prompts]


@pytest.mark.parametrize("backend", ["sdpa_in_place", "vllm_cpu"])
def test_engine_greedy_matches_generate(reference, backend):
    dtype, tokenizer, prompts, want = reference
    engine = LLMEngine(EngineConfig(generator=QWEN05, embedder=None, dtype=dtype, max_num_batched_tokens=48,
                                    attention_backend=backend))
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in engine.eos_ids
    for i, ids in enumerate(prompts):  # chunked prefills beside decodes and backbone embedding rows
        engine.add_request(f"g{i}", list(ids), SamplingParams(max_tokens=16))
        engine.add_request(f"e{i}", QUESTIONS[i], PoolingParams(model="backbone"))
    results = run_all(engine)
    assert engine.get_stats()["mixed_steps"] > 0
    assert [results[f"g{i}"].token_ids for i in range(len(prompts))] == want
    assert "Paris" in tokenizer.decode(want[0])
