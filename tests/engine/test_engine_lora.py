"""An embedding adapter on the shared backbone touches the embedding rows only."""
import pytest
import torch

from orthrus_rag.engine import PoolingParams, SamplingParams
from tests.engine.conftest import PROMPTS, hf_greedy, run_all


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


def test_lora_options_the_rows_cannot_apply_are_refused(tiny_llama_dir, lora_dir, tmp_path):
    import json
    import shutil

    from orthrus_rag.engine import InvalidRequestError, LLMEngine
    from tests.engine.conftest import tiny_config

    plain = json.loads((lora_dir / "adapter_config.json").read_text())
    for change, named in [({"use_dora": True}, "use_dora=True"), ({"rank_pattern": {"q_proj": 8}}, "rank_pattern"),
                          ({"bias": "lora_only"}, "bias='lora_only'"), ({"peft_type": "IA3"}, "peft_type=IA3")]:
        folder = tmp_path / named.split("=")[0]
        shutil.copytree(lora_dir, folder)
        (folder / "adapter_config.json").write_text(json.dumps({**plain, **change}))
        with pytest.raises(InvalidRequestError, match=f"only plain LoRA.*{named}"):
            LLMEngine(tiny_config(tiny_llama_dir, embedding_adapter=str(folder)))


@pytest.mark.shipped
def test_shipped_adapter_rows_equal_the_peft_model_pooled_output(smollm2_path):
    """The shipped SmolLM2 embedding adapter, through the engine (float32, chunked, beside generation), gives the
    pooled output of the PEFT model built from the same folder, as trained (mean pooling, query prefix)."""
    import json

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orthrus_rag.engine import EngineConfig, LLMEngine
    from orthrus_rag.models import resolve_adapter_path

    folder = resolve_adapter_path("smollm2-135m-2wiki")
    trained = json.loads((folder / "training.json").read_text())["settings"]
    texts = [trained["query_prefix"] + "Who was the mother of Lothair II?",
             trained["passage_prefix"] + "Title: Lothair II\nLothair II was a king of Lotharingia. " * 3]
    engine = LLMEngine(EngineConfig(embedder=None, dtype="float32", embedding_adapter="smollm2-135m-2wiki",
                                    max_num_batched_tokens=24))
    engine.add_request("g", "The capital of France is", SamplingParams(max_tokens=4))
    for i, text in enumerate(texts):
        engine.add_request(f"e{i}", text, PoolingParams(pooling=trained["pooling"], model="backbone"))
    results = run_all(engine)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    base = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, folder).eval()
    for i, text in enumerate(texts):
        with torch.no_grad():
            hidden = peft_model(torch.tensor([tokenizer.encode(text)]), output_hidden_states=True).hidden_states[-1][0]
        pooled = hidden.mean(0) if trained["pooling"] == "mean" else hidden[-1]
        want = torch.nn.functional.normalize(pooled, dim=-1)
        got = torch.from_numpy(results[f"e{i}"].embedding)
        assert (got - want).abs().max().item() <= 1e-5
