"""The shipped models resolve, load and run; the GGUF conversion loses nothing."""
import pytest
import torch

from orthrus_rag.models import load_embedder, load_generator
from orthrus_rag.models.registry import SHIPPED, find_gguf

pytestmark = pytest.mark.shipped

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Water boils at a temperature of"]


def test_converted_smollm2_matches_gguf(smollm2_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf(SHIPPED["smollm2-135m-instruct"])
    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    converted, tokenizer = load_generator("smollm2-135m-instruct", dtype="float32")
    gguf_tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    for name, a in converted.state_dict().items():
        assert torch.equal(a, direct.state_dict()[name]), name
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        assert ids.tolist() == gguf_tokenizer(prompt, return_tensors="pt").input_ids.tolist()
        kwargs = dict(max_new_tokens=8, do_sample=False)
        assert torch.equal(converted.generate(ids, **kwargs), direct.generate(ids, **kwargs))


def test_smollm2_forward_bf16_and_chat_template():
    model, tokenizer = load_generator("smollm2-135m-instruct", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert "Hi" in text and text != "Hi"
    with torch.no_grad():
        logits = model(**tokenizer(text, return_tensors="pt")).logits
    assert logits.shape[-1] == model.config.vocab_size and torch.isfinite(logits.float()).all()


def test_minilm_similarity():
    model = load_embedder("all-minilm-l6-v2", dtype="float32")
    a, b, c = model.encode(["How do I bake bread at home?", "What is an easy recipe for homemade bread?",
                            "Quarterly interest rates rose in the bond market."], convert_to_tensor=True)
    assert a.shape == (384,)
    assert float(a @ b) > 0.7
    assert float(a @ c) < 0.3
