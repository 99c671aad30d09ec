"""`python -m orthrus_rag.eval.experiment.retrieval_recall` on the demo set with the tiny random models: one row per retrieval mode,
BM25's row equal to scoring the BM25 index directly, rows merged across runs, one-line errors."""
import json
import sys

import pytest

from orthrus_rag.eval.experiment.datasets import load_questions
from orthrus_rag.eval.experiment.metrics import all_gold, passage_recall
from orthrus_rag.eval.experiment.retrieval_recall import main
from orthrus_rag.indexes import load_corpus
from orthrus_rag.indexes.bm25_index import BM25Index
from orthrus_rag.demo import demo_corpus_path, demo_questions_path


@pytest.fixture
def run(monkeypatch, tiny_llama_dir, tiny_encoder_dir, tmp_path):
    def run_with(*args):
        monkeypatch.setattr(sys, "argv", ["retrieval_recall", f"model.name={tiny_llama_dir}",
                                          f"embedder.name={tiny_encoder_dir}", "runtime.dtype=float32",
                                          f"index.folder={tmp_path / 'index'}", "dataset=demo",
                                          f"out={tmp_path / 'recall.json'}", *args])
        main()
        return json.loads((tmp_path / "recall.json").read_text())

    return run_with


def test_a_row_per_mode_scored_as_the_metrics_do(run, tiny_encoder_dir, capsys):
    results = run()
    labels = [f"dense ({tiny_encoder_dir})", "bm25", f"bm25 + {tiny_encoder_dir} (rrf_k=60, candidates=15)"]
    assert list(results["rows"]) == labels and results["n"] == 30 and results["num_passages"] == 152
    questions = load_questions(demo_questions_path(), "all")
    index = BM25Index.build(load_corpus(demo_corpus_path()))
    found = [index.search_text(q.question, 15) for q in questions]
    bm25 = results["rows"]["bm25"]
    assert bm25["recall"]["@5"] == pytest.approx(
        sum(passage_recall(q.gold_titles, f[:5]) for q, f in zip(questions, found)) / 30)
    assert bm25["all_gold"] == pytest.approx(sum(all_gold(q.gold_titles, f) for q, f in zip(questions, found)) / 30)
    assert bm25["recall"]["@5"] > 0.3  # the demo questions name their passages' titles
    for row in results["rows"].values():
        assert 0 <= row["recall"]["@5"] <= row["recall"]["@15"] <= 1 and row["n"] == 30
    out = capsys.readouterr().out
    assert "| retrieval | recall@5 | recall@15 | all-gold@15 |" in out and f"| bm25 | {bm25['recall']['@5']:.3f} |" in out


def test_later_runs_add_rows(run, tiny_encoder_dir):
    run("modes=[bm25]")
    results = run("modes=[hybrid]", "index.candidates=20")
    assert list(results["rows"]) == ["bm25", f"bm25 + {tiny_encoder_dir} (rrf_k=60, candidates=20)"]


def test_rows_of_cut_and_whole_passages_are_kept_apart(run, tiny_encoder_dir):
    whole = run("modes=[dense]")["rows"][f"dense ({tiny_encoder_dir})"]
    rows = run("modes=[dense]", "embedder.passage_max_tokens=3")["rows"]
    cut = rows[f"dense ({tiny_encoder_dir}, passages cut at 3 tokens)"]
    assert len(rows) == 2 and cut["recall"] != whole["recall"]  # three tokens of a passage find less


def test_unknown_mode_is_a_one_line_error(run, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run("modes=[sparse]")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == ("retrieval_recall: error: modes must be a non-empty list of dense, "
                                               "bm25, hybrid; got ['sparse']")


def test_distractors_search_the_gold_passages_and_a_seeded_sample(run, tmp_path):
    questions = load_questions(demo_questions_path(), "all")
    gold = {t for q in questions for t in q.gold_titles}
    results = run("modes=[bm25]", "distractors=5")
    sample = [json.loads(line) for line in (tmp_path / "recall.corpus.jsonl").read_text().splitlines()]
    assert {p["title"] for p in sample} >= gold and len(sample) == len(gold) + 5
    assert results["num_passages"] == len(sample) and results["corpus"].endswith("recall.corpus.jsonl")
    again = run("modes=[bm25]", "distractors=5")  # seeded: the same sample, the same scores
    assert again["rows"]["bm25"] == {**results["rows"]["bm25"], "seconds": again["rows"]["bm25"]["seconds"]}
