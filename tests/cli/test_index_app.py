"""`orthrus-rag-index` on the tiny embedder: builds once, then finds the cached index."""
from __future__ import annotations

import json

import pytest

from orthrus_rag.cli.index import main


def test_builds_then_finds_the_cached_index(run_app, tiny_models, tmp_path, capsys):
    run_app(main, "orthrus-rag-index", *tiny_models)
    first = capsys.readouterr().out
    folder = tmp_path / "index"
    assert "index built:" in first and str(folder) in first and "152 passages, dimension 32" in first
    assert json.loads((folder / "manifest.json").read_text())["num_passages"] == 152
    run_app(main, "orthrus-rag-index", *tiny_models)
    assert "index found cached:" in capsys.readouterr().out


def test_own_corpus_and_factory(run_app, tiny_models, tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"T{i}", "text": f"passage {i}"}) + "\n"
                              for i in range(40)))
    run_app(main, "orthrus-rag-index", *tiny_models, f"corpus={corpus}", "index=hnsw")
    assert "40 passages, dimension 32, factory HNSW32" in capsys.readouterr().out


def test_missing_corpus_is_a_one_line_error(run_app, tiny_models, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_app(main, "orthrus-rag-index", *tiny_models, f"corpus={tmp_path / 'none.jsonl'}")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "orthrus-rag-index: error: corpus file not found" in err and "Traceback" not in err


def test_bm25_index_built_then_found_cached_without_the_engine(run_app, tiny_models, tmp_path, capsys):
    run_app(main, "orthrus-rag-index", *tiny_models, "index.retrieval=bm25", "model.name=/no/such/model")
    out = capsys.readouterr().out
    assert "BM25 index built:" in out and str(tmp_path / "index" / "bm25") in out and "152 passages, BM25" in out
    assert not (tmp_path / "index" / "manifest.json").exists()
    run_app(main, "orthrus-rag-index", *tiny_models, "index.retrieval=hybrid")
    out = capsys.readouterr().out
    assert "index built:" in out and "BM25 index found cached:" in out


def test_unknown_retrieval_mode_is_a_one_line_error(run_app, tiny_models, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_app(main, "orthrus-rag-index", *tiny_models, "index.retrieval=sparse")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == ("orthrus-rag-index: error: index.retrieval: expected 'dense' or 'bm25' or 'hybrid', "
                           "got 'sparse'")


@pytest.mark.parametrize("retrieval", ["bm25", "dense"])
def test_empty_corpus_is_a_one_line_error(run_app, tiny_models, tmp_path, capsys, retrieval):
    corpus = tmp_path / "empty.jsonl"
    corpus.write_text("")
    with pytest.raises(SystemExit) as exit_info:
        run_app(main, "orthrus-rag-index", *tiny_models, f"corpus={corpus}", f"index.retrieval={retrieval}")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"orthrus-rag-index: error: the corpus {corpus} holds no passages; give a .jsonl or .json file "
                   "of passages")
