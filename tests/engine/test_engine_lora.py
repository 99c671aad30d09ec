"""An embedding adapter on the shared backbone touches the embedding rows only."""
import pytest
import torch

from orthrus_rag.engine import PoolingParams, SamplingParams
from tests.engine.conftest import PROMPTS, hf_greedy, run_all


@pytest.fixture(scope="module")
def lora_dir(tmp_path_factory, tiny_llama_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj", "o_proj"],
                        init_lora_weights=False)
    peft_model = get_peft_model(base, config)
    folder = tmp_path_factory.mktemp("lora")
    peft_model.save_pretrained(folder)
    return folder


def test_lora_on_embedding_rows_only(make_engine, tokenizer, tiny_llama_dir, hf_tiny, lora_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, lora_dir).to(hf_tiny.device).eval()
    engine = make_engine(embedding_adapter=str(lora_dir), max_num_batched_tokens=16)
    prompts = [tokenizer.encode(p) for p in PROMPTS[:5]]
    for i, ids in enumerate(prompts):
        engine.add_request(f"g{i}", ids, SamplingParams(max_tokens=6, ignore_eos=True))
        engine.add_request(f"e{i}", ids, PoolingParams(model="backbone", normalize=False))
    results = run_all(engine)
    assert engine.get_stats()["mixed_steps"] > 0
    for i, ids in enumerate(prompts):
        assert results[f"g{i}"].token_ids == hf_greedy(hf_tiny, ids, 6)  # base model, untouched by the adapter
        with torch.no_grad():
            inputs = torch.tensor([ids], device=hf_tiny.device)
            hidden = peft_model(inputs, output_hidden_states=True).hidden_states[-1][0].cpu()
            plain = hf_tiny.model(inputs).last_hidden_state[0].cpu()
        got = torch.from_numpy(results[f"e{i}"].embedding)
        assert (got - hidden.mean(0)).abs().max().item() <= 1e-5
        assert (got - plain.mean(0)).abs().max().item() > 1e-3  # the adapter really changed embeddings


def test_missing_adapter_folder_is_a_clear_error(tiny_llama_dir, tmp_path):
    from orthrus_rag.engine import LLMEngine
    from tests.engine.conftest import tiny_config

    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        LLMEngine(tiny_config(tiny_llama_dir, embedding_adapter=str(tmp_path)))
