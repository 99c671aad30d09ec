"""Dummy models: shipped shapes of real size (checked on the meta device), random weights built on the target
device, the SmolLM2 tokenizer, and the engine running them. Only the tiny shapes are ever built."""
import json

import pytest
import torch

from orthrus_rag.engine import EngineConfig, InvalidRequestError, LLMEngine, PoolingParams, SamplingParams
from orthrus_rag.models import ModelNotFoundError, load_embedder, load_generator, resolve_model_path
from orthrus_rag.models import dummy


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ORTHRUS_RAG_CACHE", str(tmp_path_factory.getbasetemp() / "dummy-cache"))


def meta_params(shape: str) -> int:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    folder = dummy.CONFIGS / shape
    auto = AutoModel if dummy.kind(folder) == "embedder" else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(AutoConfig.from_pretrained(folder))
    return sum(p.numel() for p in model.parameters())


def test_real_sizes_on_the_meta_device():
    assert meta_params("llama-3.1-8b") == 8_030_261_248  # Llama-3.1-8B's published parameter count
    assert meta_params("smollm2-135m") == 134_515_008  # SmolLM2-135M's
    # Mistral-7B (7,241,732,096) with its untied input and output tables grown from 32,000 to SmolLM2's 49,152 rows.
    assert meta_params("mistral-7b") == 7_241_732_096 + 2 * (49_152 - 32_000) * 4096
    # all-MiniLM-L6-v2 with pooler (22,713,216), its token table grown from 30,522 to 49,152 rows.
    assert meta_params("minilm-l6") == 22_713_216 + (49_152 - 30_522) * 384


def test_every_shape_fits_the_tokenizer():
    from transformers import AutoConfig, AutoTokenizer

    size = len(AutoTokenizer.from_pretrained(dummy.TOKENIZER))
    assert size == 49_152
    for shape in dummy.shapes():
        if dummy.kind(dummy.CONFIGS / shape) != "adapter":
            assert AutoConfig.from_pretrained(dummy.CONFIGS / shape).vocab_size >= size, shape


def test_generator_folder_holds_config_and_tokenizer_only():
    folder = resolve_model_path("dummy:llama-3.1-8b")
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not [n for n in names if n.endswith((".safetensors", ".bin"))]
    assert resolve_model_path("DUMMY:llama-3.1-8b") == folder  # written once, found again


def test_unknown_shape_lists_the_shipped_ones():
    with pytest.raises(ModelNotFoundError, match="dummy:llama-3.1-8b"):
        resolve_model_path("dummy:gpt-5")


def test_dummy_generator_is_built_on_the_device_in_the_dtype_and_is_reproducible():
    model, tokenizer = load_generator("dummy:tiny-llama", "bfloat16", "cpu")
    again, _ = load_generator("dummy:tiny-llama", "bfloat16", "cpu")
    weights = [p for p in model.parameters() if p.dim() == 2]
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    assert 0.015 < weights[1].float().std().item() < 0.025  # transformers' own init (initializer_range 0.02)
    assert tokenizer.eos_token_id == model.config.eos_token_id == 2
    with torch.no_grad():
        logits = model(**tokenizer("Hello there", return_tensors="pt")).logits
    assert logits.shape[-1] == 49_152 and torch.isfinite(logits).all()


def test_load_format_dummy_keeps_a_folders_config_and_tokenizer_with_new_weights(tiny_llama_dir, tmp_path):
    import shutil

    from transformers import AutoModelForCausalLM

    shutil.copytree(tiny_llama_dir, tmp_path, dirs_exist_ok=True)
    real = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    with torch.no_grad():
        for param in real.parameters():
            param.fill_(0.5)
    real.save_pretrained(tmp_path)  # weights a loader could not produce at random
    model, tokenizer = load_generator(str(tmp_path), "float32", "cpu", load_format="dummy")
    assert model.config.to_dict() == real.config.to_dict()
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in real.named_parameters()]
    assert not (model.model.layers[0].mlp.up_proj.weight == 0.5).any()
    assert len(tokenizer) == 49_152


def test_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path):
    config = json.loads((dummy.CONFIGS / "tiny-llama" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config | {"vocab_size": 32_000}))
    with pytest.raises(dummy.DummyModelError, match="vocab_size >= 49152"):
        load_generator(str(tmp_path), "float32", "cpu", load_format="dummy")


def test_dummy_embedder_is_a_sentence_transformer_with_weights_written_once():
    model = load_embedder("dummy:tiny-bert", "float32", "cpu")
    weights = next(resolve_model_path("dummy:tiny-bert").glob("*.safetensors"))
    written = weights.stat().st_mtime_ns
    again = load_embedder("dummy:tiny-bert", "float32", "cpu")
    assert weights.stat().st_mtime_ns == written
    vectors = model.encode(["a passage", "another one"], convert_to_tensor=True)
    assert vectors.shape == (2, 32)
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(2), atol=1e-5)  # Normalize module kept
    assert torch.allclose(vectors, again.encode(["a passage", "another one"], convert_to_tensor=True))
    assert model.tokenizer("Hello")["input_ids"] == load_generator("dummy:tiny-llama")[1]("Hello")["input_ids"]


def test_e5_adapter_has_every_target_of_the_mistral_shape():
    from safetensors import safe_open

    folder = resolve_model_path("dummy:e5-mistral-lora")
    with safe_open(str(folder / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
        q_a = f.get_slice("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").get_shape()
        k_b = f.get_slice("base_model.model.model.layers.31.self_attn.k_proj.lora_B.weight").get_shape()
        down_a = f.get_slice("base_model.model.model.layers.5.mlp.down_proj.lora_A.weight").get_shape()
    assert len(keys) == 2 * 7 * 32
    assert (q_a, k_b, down_a) == ([16, 4096], [1024, 16], [16, 14336])


def test_engine_runs_dummy_models_and_load_format_is_validated():
    config = EngineConfig(generator="dummy:tiny-llama", embedder="dummy:tiny-bert", dtype="float32", device="cpu",
                          embedding_adapter="dummy:tiny-lora", max_num_batched_tokens=64)
    engine = LLMEngine(config)
    engine.add_request("g", "Hello there", SamplingParams(max_tokens=4, ignore_eos=True))
    engine.add_request("e", "Hello there", PoolingParams())
    engine.add_request("b", "Hello there", PoolingParams(model="backbone"))
    results = {}
    while engine.has_unfinished():
        results.update({o.request_id: o.result for o in engine.step() if o.finished})
    assert len(results["g"].token_ids) == 4
    assert results["e"].embedding.shape[-1] == 32 and results["b"].embedding.shape[-1] == 64
    with pytest.raises(InvalidRequestError, match="load_format must be auto or dummy"):
        EngineConfig(load_format="random")


def test_dummy_adapter_changes_backbone_embeddings_only():
    def embed(adapter):
        engine = LLMEngine(EngineConfig(generator="dummy:tiny-llama", embedder=None, dtype="float32", device="cpu",
                                        embedding_adapter=adapter))
        engine.add_request("b", "Hello there", PoolingParams(model="backbone"))
        engine.add_request("g", "Hello there", SamplingParams(max_tokens=3, ignore_eos=True))
        results = {}
        while engine.has_unfinished():
            results.update({o.request_id: o.result for o in engine.step() if o.finished})
        return torch.as_tensor(results["b"].embedding), results["g"].token_ids

    (plain, tokens), (adapted, adapted_tokens) = embed(None), embed("dummy:tiny-lora")
    assert tokens == adapted_tokens
    assert not torch.allclose(plain, adapted, atol=1e-4)


@pytest.mark.shipped
def test_shipped_tokenizer_is_smollm2s(smollm2_path):
    from transformers import AutoTokenizer

    shipped, ours = AutoTokenizer.from_pretrained(smollm2_path), AutoTokenizer.from_pretrained(dummy.TOKENIZER)
    text = "Héllo wörld <|im_start|>user\n 12345 tokens\tand\u00a0spaces"
    assert ours(text)["input_ids"] == shipped(text)["input_ids"]
    assert ours.get_vocab() == shipped.get_vocab()
    messages = [{"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(messages, tokenize=False) == shipped.apply_chat_template(messages, tokenize=False)
