import json

import pytest

from orthrus_rag.indexes.corpus import CorpusFormatError, corpus_fingerprint, load_corpus
from orthrus_rag.rag.types import Passage


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_with_id_title_text(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "title": "Ana", "text": "Ana lives."},
                                              {"id": "b", "title": "Bo", "text": "Bo sings."}])
    assert load_corpus(path) == [Passage("a", "Ana", "Ana lives."), Passage("b", "Bo", "Bo sings.")]


def test_jsonl_contents_and_missing_id(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"contents": '"Ana"\nAna lives by the river.'},
                                              {"contents": "Bo\nBo sings."}])
    assert load_corpus(path) == [Passage("0", "Ana", "Ana lives by the river."), Passage("1", "Bo", "Bo sings.")]


def test_a_missing_or_null_title_is_empty(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "title": None, "text": "Ana lives."},
                                              {"id": "b", "text": "Bo sings."},
                                              {"id": "c", "title": None, "contents": "Cy\nCy reads."},
                                              {"id": "d", "title": None, "contents": "Dee writes."}])
    passages = load_corpus(path)
    assert [p.title for p in passages] == ["", "", "Cy", ""]
    assert passages[0].formatted() == "Ana lives." and corpus_fingerprint(passages)


def test_json_list_without_ids(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps([{"title": "Ana", "text": "x"}, {"title": "Bo", "text": "y"}]))
    assert [(p.id, p.title, p.text) for p in load_corpus(path)] == [("0", "Ana", "x"), ("1", "Bo", "y")]


def test_json_dict_keyed_by_id(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"d7": {"title": "Ana", "text": "x"}}))
    assert load_corpus(path) == [Passage("d7", "Ana", "x")]


def test_bad_rows_say_what_is_wrong(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "body": "no text"}])
    with pytest.raises(CorpusFormatError, match="neither 'text' nor 'contents'"):
        load_corpus(path)
    (tmp_path / "broken.jsonl").write_text('{"id": 1}\n{oops\n')
    with pytest.raises(CorpusFormatError, match="broken.jsonl:2"):
        load_corpus(tmp_path / "broken.jsonl")
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "missing.jsonl")


def test_fingerprint_changes_with_any_field():
    base = [Passage("a", "Ana", "x"), Passage("b", "Bo", "y")]
    fp = corpus_fingerprint(base)
    assert fp == corpus_fingerprint([Passage("a", "Ana", "x", score=3.0), Passage("b", "Bo", "y")])
    assert fp != corpus_fingerprint([Passage("a", "Ana", "x"), Passage("b", "Bo", "z")])
    assert fp != corpus_fingerprint([Passage("a", "Ana", "x"), Passage("c", "Bo", "y")])
    assert fp != corpus_fingerprint([Passage("a", "AnaB", "x"), Passage("b", "o", "y")])
    assert fp != corpus_fingerprint(base[::-1])


def test_a_json_corpus_that_is_not_passages_is_a_format_error(tmp_path):
    for text, message in [('{"a": 1}', "passage 0 of .* is a int"), ("[{", "is not valid JSON")]:
        path = tmp_path / "corpus.json"
        path.write_text(text)
        with pytest.raises(CorpusFormatError, match=message):
            load_corpus(path)
