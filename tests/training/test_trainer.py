"""Contrastive adapter training on a tiny random model: the loss falls, held-out recall rises, and the folder it
writes is what the engine loads (its rows equal the PEFT model's pooled output)."""
import json
import math
import random

import pytest
import torch

from orthrus_rag.training import Pair, TrainSettings, train_adapter
from orthrus_rag.training.trainer import distillation, info_nce, masked_logits, relevance_mask

SYLLABLES = ["ka", "lo", "mi", "ren", "tus", "vo", "zan", "pe", "dor", "fi", "gu", "shi", "bra", "nel", "qua", "ix"]
KINDS = ["river", "poet", "castle", "village", "composer", "bishop", "mountain", "film"]


def toy_pairs(n: int, seed: int = 0) -> list[Pair]:
    """(name -> short passage about that name) for `n` made-up names."""
    rng = random.Random(seed)
    names = set()
    while len(names) < n:
        names.add("".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize())
    pairs = []
    for i, name in enumerate(sorted(names)):
        kind, place = rng.choice(KINDS), "".join(rng.choice(SYLLABLES) for _ in range(2)).capitalize()
        pairs.append(Pair(name, f"Title: {name}\n{name} is a {kind} near {place}.", f"p{i}", "title"))
    return pairs


def toy_settings(model_dir, out, **overrides) -> TrainSettings:
    base = dict(model=str(model_dir), output=str(out), rank=8, alpha=16, batch_size=16, lr=3e-3, warmup_steps=2,
                max_steps=30, held_out=40, checkpoint_every=15, seed=0, query_prefix="query: ", passage_max_tokens=32,
                query_max_tokens=16, temperature=0.05, save_dtype="float32", num_threads=1, batching="bm25",
                group_size=4)
    return TrainSettings(**{**base, **overrides})


def train(settings: TrainSettings, pairs: list[Pair], model_and_tokenizer=None):
    """train_adapter, with torch's thread count (which it sets) put back afterwards."""
    threads = torch.get_num_threads()
    try:
        return train_adapter(settings, pairs, model_and_tokenizer)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(tiny_llama_dir, tmp_path_factory):
    settings = toy_settings(tiny_llama_dir, tmp_path_factory.mktemp("adapter"))
    return settings, train(settings, toy_pairs(160))


def test_loss_falls_and_held_out_recall_rises(trained):
    _, result = trained
    first, last = sum(result.losses[:5]) / 5, sum(result.losses[-5:]) / 5
    assert last < 0.7 * first, result.losses
    assert result.recall_after["recall@1"] > result.recall_before["recall@1"] + 0.1, (result.recall_before,
                                                                                      result.recall_after)


def test_bfloat16_autocast_trains_too(tiny_llama_dir, tmp_path):
    from orthrus_rag.training.trainer import _autocast, lora_model

    settings = toy_settings(tiny_llama_dir, tmp_path, dtype="bfloat16", checkpoint_every=30)
    model, tokenizer = lora_model(settings)
    layer = torch.nn.Linear(2, 2)
    with _autocast(model, "bfloat16"):
        assert layer(torch.ones(1, 2)).dtype == torch.bfloat16
    with _autocast(model, "float32"):
        assert layer(torch.ones(1, 2)).dtype == torch.float32
    result = train(settings, toy_pairs(160), (model, tokenizer))
    assert sum(result.losses[-5:]) / 5 < 0.7 * sum(result.losses[:5]) / 5, result.losses
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)


def test_writes_peft_folder_checkpoints_metadata_and_plot(trained):
    settings, result = trained
    out = result.output
    for name in ("adapter_config.json", "adapter_model.safetensors", "training.json", "loss.png"):
        assert (out / name).is_file(), name
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000015", "step-000030"]
    meta = json.loads((out / "training.json").read_text())
    assert meta["steps"] == 30 and meta["settings"]["pooling"] == "mean"
    assert meta["settings"]["query_prefix"] == "query: "
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == settings.model


def test_engine_rows_equal_the_peft_model_pooled_output(trained, tiny_llama_dir, tokenizer):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from orthrus_rag.engine import LLMEngine, PoolingParams
    from orthrus_rag.training.pooled import encode_batch, pooled_embeddings
    from tests.engine.conftest import run_all, tiny_config

    _, result = trained
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, result.output).eval()
    texts = ["query: Kalomi", "Title: Kalomi\nKalomi is a river near Zanpe."]
    engine = LLMEngine(tiny_config(tiny_llama_dir, embedding_adapter=str(result.output), max_num_batched_tokens=8))
    for i, text in enumerate(texts):
        engine.add_request(f"e{i}", text, PoolingParams(model="backbone"))
    results = run_all(engine)
    with torch.no_grad():
        for i, text in enumerate(texts):
            want = pooled_embeddings(peft_model, encode_batch(tokenizer, [text], 64), "mean")[0]
            got = torch.from_numpy(results[f"e{i}"].embedding)
            assert (got - want).abs().max().item() <= 1e-5


def test_info_nce_matches_hand_computed_value():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    logits = torch.tensor([[1.0, 0.6], [0.0, 0.8]]) / 0.5
    want = -(logits.log_softmax(1)[0, 0] + logits.log_softmax(1)[1, 1]) / 2
    got = info_nce(masked_logits(q, d, torch.eye(2, dtype=torch.bool), 0.5)).item()
    assert got == pytest.approx(want.item(), abs=1e-6)
    # a passage relevant to another query of the batch is no negative of it
    assert info_nce(masked_logits(q, d, torch.ones(2, 2, dtype=torch.bool), 0.5)).item() == pytest.approx(0.0, abs=1e-6)


def test_distillation_matches_hand_computed_kl_and_skips_masked_passages():
    student = torch.tensor([[2.0, 0.0, float("-inf")], [0.0, 1.0, 3.0]], requires_grad=True)
    teacher = torch.tensor([[1.0, 1.0, float("-inf")], [0.0, 0.0, 0.0]])
    p, q = teacher.softmax(1), student.detach().softmax(1)
    want = ((p[0, :2] * (p[0, :2] / q[0, :2]).log()).sum() + (p[1] * (p[1] / q[1]).log()).sum()) / 2
    loss = distillation(student, teacher)
    assert loss.item() == pytest.approx(want.item(), abs=1e-6)
    loss.backward()
    assert torch.isfinite(student.grad).all()
    assert distillation(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)


def test_masked_logits_keep_the_own_passage_and_mask_other_relevant_ones():
    q = d = torch.eye(2)
    logits = masked_logits(q, d, torch.ones(2, 2, dtype=torch.bool), 0.5)
    assert logits.tolist() == [[2.0, float("-inf")], [float("-inf"), 2.0]]


def test_distillation_from_a_teacher_trains_and_is_recorded(tiny_llama_dir, tiny_encoder_dir, tmp_path):
    from orthrus_rag.models import load_embedder
    from orthrus_rag.training.trainer import batch_loss, lora_model
    from orthrus_rag.training.batching import relevant_passages

    settings = toy_settings(tiny_llama_dir, tmp_path, distill_from=str(tiny_encoder_dir), distill_weight=0.5,
                            max_steps=4, checkpoint_every=4)
    model, tokenizer = lora_model(settings)
    pairs = toy_pairs(40)
    with torch.no_grad():
        plain = batch_loss(model, tokenizer, pairs[:8], relevant_passages(pairs), settings)
        teacher = load_embedder(settings.distill_from, "float32")
        both = batch_loss(model, tokenizer, pairs[:8], relevant_passages(pairs), settings, teacher)
    assert both.item() > plain.item()  # the KL term of a random teacher is positive
    result = train(settings, pairs, (model, tokenizer))
    assert len(result.losses) == 4 and all(map(math.isfinite, result.losses))
    meta = json.loads((result.output / "training.json").read_text())
    assert meta["settings"]["distill_from"] == str(tiny_encoder_dir) and meta["settings"]["distill_weight"] == 0.5


def test_relevance_mask_covers_the_same_passage_and_other_gold_passages():
    batch = [Pair("q", "A", "a", "question"), Pair("q", "B", "b", "question"), Pair("Title A", "A", "a", "title"),
             Pair("Title C", "C", "c", "title")]
    relevant = {"q": {"a", "b"}, "Title A": {"a"}, "Title C": {"c"}}
    assert relevance_mask(batch, relevant).tolist() == [[True, True, True, False], [True, True, True, False],
                                                        [True, False, True, False], [False, False, False, True]]


def test_bad_settings_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="pooling must be one of"):
        TrainSettings(model="x", output=str(tmp_path), pooling="cls").check()
    with pytest.raises(ValueError, match="negatives"):
        TrainSettings(model="x", output=str(tmp_path), batch_size=1).check()
    with pytest.raises(ValueError, match="batching must be one of"):
        TrainSettings(model="x", output=str(tmp_path), batching="hard").check()
    with pytest.raises(ValueError, match="group_size"):
        TrainSettings(model="x", output=str(tmp_path), group_size=1).check()
    with pytest.raises(ValueError, match="distill_weight must be >= 0"):
        TrainSettings(model="x", output=str(tmp_path), distill_weight=-1).check()
    with pytest.raises(ValueError, match="dtype must be float32 or bfloat16"):
        TrainSettings(model="x", output=str(tmp_path), dtype="float16").check()
