"""Embeddings: chunked backbone pooling equals unchunked pooling; the co-located embedder equals sentence-transformers."""
import numpy as np
import pytest
import torch

from orthrus_rag.engine import PoolingParams, SamplingParams
from tests.engine.conftest import PROMPTS, hf_pool, run_all


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
@pytest.mark.parametrize("normalize", [True, False])
def test_chunked_backbone_pooling_matches_unchunked(make_engine, tokenizer, hf_tiny, pooling, normalize):
    engine = make_engine(max_num_batched_tokens=8)  # long inputs span several chunks
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    for i, ids in enumerate(prompts):
        engine.add_request(f"e{i}", ids, PoolingParams(pooling=pooling, normalize=normalize, model="backbone"))
        engine.add_request(f"g{i}", ids, SamplingParams(max_tokens=3))
    results = run_all(engine)
    assert max(len(p) for p in prompts) > 3 * 8
    for i, ids in enumerate(prompts):
        expected = hf_pool(hf_tiny, ids, pooling, normalize)
        got = torch.from_numpy(results[f"e{i}"].embedding)
        assert (got - expected).abs().max().item() <= 1e-5
        assert results[f"e{i}"].num_tokens == len(ids)


@pytest.mark.parametrize("truncate", [1, 5, 17, 10_000])
def test_truncate_embeds_the_first_tokens_only(make_engine, tokenizer, hf_tiny, truncate):
    engine = make_engine(max_num_batched_tokens=8)
    ids = tokenizer.encode(PROMPTS[1])
    engine.add_request("cut", ids, PoolingParams(model="backbone", truncate=truncate))
    engine.add_request("cut-text", PROMPTS[1], PoolingParams(model="backbone", truncate=truncate))
    results = run_all(engine)
    expected = hf_pool(hf_tiny, ids[:truncate], "mean", True)
    for rid in ("cut", "cut-text"):
        assert (torch.from_numpy(results[rid].embedding) - expected).abs().max().item() <= 1e-5
        assert results[rid].num_tokens == min(truncate, len(ids))


def test_truncate_cuts_the_colocated_embedders_input_before_its_windows(tiny_encoder_dir, make_engine):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tiny_encoder_dir), device="cpu")
    engine = make_engine(embedder=str(tiny_encoder_dir))
    text = " ".join(f"word{i}" for i in range(60))
    ids = st.tokenizer(text, add_special_tokens=False)["input_ids"]
    head = st.tokenizer.decode(ids[:20])
    engine.add_request("cut", text, PoolingParams(truncate=20))
    engine.add_request("head", head, PoolingParams())
    results = run_all(engine)
    assert np.abs(results["cut"].embedding - results["head"].embedding).max() < 1e-6


def test_single_chunk_embedding_takes_no_blocks(make_engine, tokenizer, monkeypatch):
    engine = make_engine(max_num_batched_tokens=64)
    tables, real = [], engine.scheduler.schedule

    def schedule():
        out = real()
        tables.extend(list(c.seq.block_table) for c in out.chunks)
        return out

    monkeypatch.setattr(engine.scheduler, "schedule", schedule)
    engine.add_request("e", tokenizer.encode("short input"), PoolingParams(model="backbone"))
    assert run_all(engine)["e"].num_tokens == len(tokenizer.encode("short input"))
    assert tables == [[]]


def test_chunked_embedding_frees_blocks_when_pooled(make_engine, tokenizer):
    engine = make_engine(max_num_batched_tokens=8)
    engine.add_request("e", tokenizer.encode(PROMPTS[4]), PoolingParams(model="backbone"))
    engine.step()
    assert engine.blocks.num_free < engine.blocks.num_blocks  # mid-way: holds KV for later chunks
    run_all(engine)
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_colocated_embedder_matches_sentence_transformers(tiny_llama_dir, tiny_encoder_dir, make_engine):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tiny_encoder_dir), device="cpu")
    engine = make_engine(embedder=str(tiny_encoder_dir))
    texts = ["a cat on a mat", "the stock market fell sharply today", "x"]
    for i, text in enumerate(texts):
        engine.add_request(f"e{i}", text, PoolingParams())
        engine.add_request(f"g{i}", "some prompt", SamplingParams(max_tokens=2))
    results = run_all(engine)
    expected = st.encode(texts, convert_to_numpy=True)
    for i in range(len(texts)):
        got = results[f"e{i}"].embedding
        assert float(np.dot(got, expected[i]) / np.linalg.norm(got) / np.linalg.norm(expected[i])) >= 0.9999


def test_colocated_embedder_windows_long_inputs(tiny_encoder_dir, make_engine):
    """Over-long inputs: the token-weighted mean of sentence-transformers' embeddings of each window."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tiny_encoder_dir), device="cpu")  # max_seq_length 48
    unnormalised = SentenceTransformer(modules=list(st)[:-1], device="cpu")
    engine = make_engine(embedder=str(tiny_encoder_dir))
    text = " ".join(f"word{i}" for i in range(60))
    engine.add_request("long", text, PoolingParams(normalize=False))
    vector = run_all(engine)["long"].embedding
    ids = st.tokenizer(text, add_special_tokens=False)["input_ids"]
    size = st.max_seq_length - 2  # each window is [CLS] + size tokens + [SEP]
    windows = [ids[i:i + size] for i in range(0, len(ids), size)]
    assert len(windows) > 1
    texts = [st.tokenizer.decode(w) for w in windows]
    assert [st.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts] == windows
    parts = unnormalised.encode(texts)
    weights = np.array([len(w) + 2 for w in windows], dtype=np.float32)
    expected = (parts * weights[:, None]).sum(0) / weights.sum()
    assert np.abs(vector - expected).max() < 1e-5


@pytest.mark.shipped
def test_shipped_minilm_bf16_close_to_sentence_transformers_fp32():
    from sentence_transformers import SentenceTransformer

    from orthrus_rag.engine import EngineConfig, LLMEngine
    from orthrus_rag.models import resolve_model_path

    engine = LLMEngine(EngineConfig(embedder="all-minilm-l6-v2", dtype="bfloat16"))
    st = SentenceTransformer(str(resolve_model_path("all-minilm-l6-v2")), device="cpu")
    texts = ["Who founded the city of Rome?", "Photosynthesis converts light into chemical energy.",
             "The 1998 World Cup final was played in Saint-Denis."]
    for i, text in enumerate(texts):
        engine.add_request(f"e{i}", text, PoolingParams())
    results = run_all(engine)
    expected = st.encode(texts)
    for i in range(len(texts)):
        assert float(np.dot(results[f"e{i}"].embedding, expected[i])) >= 0.999  # bf16 tolerance
