"""Shared fixtures: tiny random models built in code, the SmolLM2 tokenizer, offline hub, and the Hydra apps run
in-process on the tiny models."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from orthrus_rag.models import resolve_model_path  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def _import_anyio_now() -> None:
    """anyio imports its parts on first use; a test server's thread would then import them through pytest's
    assertion rewriting (anyio is a pytest plugin), whose ast.parse is not thread-safe on Python 3.11 ("AST
    constructor recursion depth mismatch" when a page was served as a file). Import them all here, on the main thread."""
    import anyio

    for name in dir(anyio):
        if not name.startswith("_"):
            getattr(anyio, name)


_import_anyio_now()


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return resolve_model_path("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    return resolve_model_path("all-minilm-l6-v2")


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer, as shipped beside the dummy model configs (equal to the converted model's: tested in
    tests/models/test_dummy.py), so tiny-model tests need no shipped model package."""
    from transformers import AutoTokenizer

    from orthrus_rag.models.dummy import TOKENIZER

    return AutoTokenizer.from_pretrained(TOKENIZER)


def tiny_llama_config(vocab_size: int, **overrides):
    """A 2-layer Llama with grouped-query attention (4 query heads, 2 KV heads, heads of 32: the smallest vLLM's CPU
    kernels take), hidden size 64."""
    from transformers import LlamaConfig

    args = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                tie_word_embeddings=True)
    args.update(overrides)
    return LlamaConfig(**args)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, tokenizer) -> Path:
    """A saved tiny random Llama folder with the SmolLM2 tokenizer, loadable by path like any model."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = tiny_llama_config(len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                               eos_token_id=tokenizer.eos_token_id)
    model = AutoModelForCausalLM.from_config(config)
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def lora_dir(tmp_path_factory, tiny_llama_dir) -> Path:
    """A saved random PEFT LoRA adapter (rank 4, non-zero weights) for the tiny Llama."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj", "o_proj"],
                        init_lora_weights=False)
    folder = tmp_path_factory.mktemp("lora")
    get_peft_model(base, config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory, minilm_path) -> Path:
    """A saved tiny random BERT sentence-transformers folder (mean pooling, normalised) with MiniLM's tokenizer."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    hf_tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    config = BertConfig(vocab_size=hf_tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    bert_dir = tmp_path_factory.mktemp("tiny-bert")
    BertModel(config).save_pretrained(bert_dir)
    hf_tokenizer.save_pretrained(bert_dir)
    word = models.Transformer(str(bert_dir), max_seq_length=48)
    st = SentenceTransformer(modules=[word, models.Pooling(32, "mean"), models.Normalize()])
    folder = tmp_path_factory.mktemp("tiny-encoder")
    st.save(str(folder))
    return folder


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster of 2 CPUs for the scale-out tests, started by the first test that asks for it."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def tiny_models(tiny_llama_dir: Path, tiny_encoder_dir: Path, tmp_path: Path) -> list[str]:
    """Overrides that run an app on the tiny models, in float32, with the index in a temporary folder."""
    return [f"model.name={tiny_llama_dir}", f"embedder.name={tiny_encoder_dir}", "runtime.dtype=float32",
            f"index.folder={tmp_path / 'index'}"]


@pytest.fixture
def run_app(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Call an app's `main()` as if from the command line with these arguments."""

    def run(main: Callable[[], None], app: str, *args: str) -> None:
        monkeypatch.setattr(sys, "argv", [app, *args])
        main()

    return run
