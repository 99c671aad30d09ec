import json
from pathlib import Path

import pytest

from orthrus_rag.eval.experiment.datasets import (DatasetError, DatasetSpec, Question, context_passages, load_aliases, load_questions,
                           read_official, read_questions, read_rows, select_split)
from orthrus_rag.rag.types import Passage
from orthrus_rag.settings import UserError

SHARED_2WIKI = Path(__file__).resolve().parents[2].parent / "shared/data/2wiki"

OFFICIAL = [
    {"_id": "q1", "type": "compositional", "question": "Where was the founder of Kestrel Works born?",
     "answer": "Ormsby", "evidences": [["Kestrel Works", "founded by", "Ida Brenn"]],
     "supporting_facts": [["Kestrel Works", 0], ["Ida Brenn", 1], ["Kestrel Works", 1]],
     "context": [["Kestrel Works", ["Kestrel Works makes pumps. ", "It was founded by Ida Brenn."]],
                 ["Ida Brenn", ["Ida Brenn was an engineer.", "She was born in Ormsby."]]]},
    {"_id": "q2", "type": "comparison", "question": "Is Ormsby older than Tull?", "answer": "yes",
     "supporting_facts": [["Ormsby", 0], ["Tull", 0]],
     "context": [["Ida Brenn", ["Ida Brenn was an engineer.", "She was born in Ormsby."]],
                 ["Ormsby", ["Ormsby dates from 1201."]]]},
]


def jsonl_rows(n: int) -> list[dict]:
    return [{"id": f"q{i}", "type": "bridge", "question": f"Question {i}?", "answer": f"A{i}", "aliases": [],
             "gold_titles": [f"T{i}", f"U{i}"], "context": None} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_splits_and_limit(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", jsonl_rows(320))
    dev, test = load_questions(path, "dev"), load_questions(path, "test")
    assert (len(dev), len(test)) == (300, 20)
    assert dev[0] == Question("q0", "Question 0?", "A0", [], ["T0", "U0"], "bridge")
    assert test[0].id == "q300"
    assert [q.id for q in load_questions(path, "test", limit=2)] == ["q300", "q301"]
    assert len(load_questions(path, "all")) == 320


def test_rows_with_a_split_field_use_it():
    rows = [{"id": "a", "split": "dev"}, {"id": "b", "split": "test"}, {"id": "c", "split": "test"}]
    assert [r["id"] for r in select_split(rows, "test", None)] == ["b", "c"]
    assert [r["id"] for r in select_split(rows, "dev", None)] == ["a"]
    with pytest.raises(DatasetError, match="split must be one of"):
        select_split(rows, "train", None)


def test_official_json_questions(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(OFFICIAL))
    questions = load_questions(path, "all")
    assert questions[0] == Question("q1", OFFICIAL[0]["question"], "Ormsby", [], ["Kestrel Works", "Ida Brenn"],
                                    "compositional")
    assert questions[1].answers == ["yes"] and questions[1].gold_titles == ["Ormsby", "Tull"]
    assert load_questions(path, "test") == []


def test_official_context_corpus_is_deduplicated(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(OFFICIAL))
    assert context_passages(read_official(path)) == [
        Passage("ctx-000000", "Kestrel Works", "Kestrel Works makes pumps. It was founded by Ida Brenn."),
        Passage("ctx-000001", "Ida Brenn", "Ida Brenn was an engineer. She was born in Ormsby."),
        Passage("ctx-000002", "Ormsby", "Ormsby dates from 1201."),
    ]


def test_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="question file not found"):
        load_questions(tmp_path / "nope.jsonl")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "x", "question": "q?"}])
    with pytest.raises(DatasetError, match="answer"):
        load_questions(bad, "all")
    (tmp_path / "q.csv").write_text("id,question\n")
    with pytest.raises(DatasetError, match="use .jsonl or .json"):
        load_questions(tmp_path / "q.csv")


def test_hugging_face_offline_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetError, match="could not load Hugging Face dataset"):
        load_questions("hf:no-such-owner/no-such-dataset-orthrus", "test")


def test_a_hugging_face_id_reaches_the_hugging_face_loader(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    spec = DatasetSpec("hub", "hf:owner/name", "corpus.jsonl", "dev", None)
    assert spec.path == "hf:owner/name" and spec.corpus == tmp_path / "corpus.jsonl"
    asked = []
    monkeypatch.setattr("orthrus_rag.eval.experiment.datasets.load_hf_questions",
                        lambda *args: asked.append(args) or [Question("q", "?", "a")])
    assert read_questions(spec) == [Question("q", "?", "a")] and asked == [("owner/name", "dev", None)]


def test_a_negative_limit_is_a_user_error_naming_the_key():
    with pytest.raises(UserError, match=r"^dataset.limit: expected null .* or an integer >= 0, got -1$"):
        DatasetSpec("demo", None, None, "all", -1)
    assert len(read_questions(DatasetSpec("demo", None, None, "all", 29))) == 29


def test_read_rows_gives_the_file_s_objects(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", jsonl_rows(3))
    assert read_rows(path) == jsonl_rows(3)
    (tmp_path / "dev.json").write_text(json.dumps(OFFICIAL))
    assert read_rows(tmp_path / "dev.json") == OFFICIAL


@pytest.mark.skipif(not SHARED_2WIKI.is_dir(), reason="shared 2Wiki data not present")
def test_shared_2wiki_splits():
    path = SHARED_2WIKI / "questions.jsonl"
    dev, test = load_questions(path, "dev"), load_questions(path, "test")
    assert (len(dev), len(test)) == (300, 700)
    assert {q.id for q in dev}.isdisjoint(q.id for q in test)
    assert all(q.gold_titles and q.answer for q in test)
    assert sum(q.answer.lower() in ("yes", "no") for q in dev + test) == 110


ALIASES = [{"Q_id": "Q30", "aliases": ["USA", "United States"], "demonyms": ["American"]},
           {"Q_id": "Q1", "aliases": [], "demonyms": []}]


def write_aliases(path: Path, rows: list[dict] = ALIASES) -> Path:
    return write_jsonl(path, rows)


def test_aliases_file_beside_the_questions_is_used(tmp_path):
    rows = [dict(OFFICIAL[0], answer="United States of America", answer_id="Q30"), dict(OFFICIAL[1], answer_id="Q1")]
    (tmp_path / "dev.json").write_text(json.dumps(rows))
    assert load_questions(tmp_path / "dev.json", "all")[0].aliases == []
    write_aliases(tmp_path / "id_aliases.json")
    first, second = load_questions(tmp_path / "dev.json", "all")
    assert first.answer_id == "Q30"
    assert first.answers == ["United States of America", "USA", "United States", "American"]
    assert second.answers == ["yes"]


def test_aliases_merge_with_the_record_field_and_an_explicit_file(tmp_path):
    row = {"id": "x", "question": "q?", "answer": "USA", "aliases": ["U.S."], "answer_id": "Q30"}
    path = write_jsonl(tmp_path / "q.jsonl", [row])
    assert load_questions(path, "all")[0].aliases == ["U.S."]
    aliases = write_aliases(tmp_path / "elsewhere.jsonl")
    assert load_questions(path, "all", aliases=aliases)[0].aliases == ["U.S.", "United States", "American"]


def test_aliases_file_errors(tmp_path):
    assert load_aliases(write_aliases(tmp_path / "a.json")) == {"Q30": ["USA", "United States", "American"], "Q1": []}
    with pytest.raises(DatasetError, match="line 2 has no Q_id"):
        load_aliases(write_jsonl(tmp_path / "b.json", [ALIASES[0], {"aliases": []}]))
    (tmp_path / "c.json").write_text('{"Q_id": "Q1"}\nnot json\n')
    with pytest.raises(DatasetError, match="line 2 is not JSON"):
        load_aliases(tmp_path / "c.json")
    with pytest.raises(FileNotFoundError, match="aliases file not found"):
        load_aliases(tmp_path / "missing.json")
