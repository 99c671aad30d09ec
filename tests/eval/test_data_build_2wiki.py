"""questions.jsonl / corpus.jsonl from a tiny dev.json in the official 2WikiMultihopQA format."""
import json

import pytest

from orthrus_rag.eval.data.build_2wiki import main
from orthrus_rag.eval.experiment.datasets import load_questions
from orthrus_rag.indexes import load_corpus

DEV = [
    {"_id": "q1", "type": "compositional", "question": "Where was the founder of Kestrel Works born?",
     "context": [["Kestrel Works", ["Kestrel Works makes pumps.", "It was founded by Ida Brenn."]],
                 ["Ida Brenn", ["Ida Brenn was an engineer.", " She was born in Ormsby."]],
                 ["Tull", ["Tull is a village."]]],
     "supporting_facts": [["Kestrel Works", 1], ["Ida Brenn", 1]],
     "evidences": [["Kestrel Works", "founded by", "Ida Brenn"], ["Ida Brenn", "place of birth", "Ormsby"]],
     "evidences_id": [], "answer": "Ormsby", "answer_id": "Q100"},
    {"_id": "q2", "type": "comparison", "question": "Is Ormsby older than Tull?",
     "context": [["Ormsby", ["Ormsby dates from 1201."]], ["Tull", ["Tull is a village."]],
                 ["Ida Brenn", ["Ida Brenn was an engineer.", "She was born in Ormsby."]]],
     "supporting_facts": [["Ormsby", 0], ["Tull", 0]], "evidences": [], "evidences_id": [], "answer": "yes",
     "answer_id": ""},
    {"_id": "q3", "type": "inference", "question": "Who is the grandfather of Ida Brenn?",
     "context": [["Ida Brenn", ["Ida Brenn was an engineer.", "She was born in Ormsby."]]],
     "supporting_facts": [["Ida Brenn", 0]], "evidences": [], "evidences_id": [], "answer": "Olaf Brenn",
     "answer_id": "Q200"},
]
ALIASES = [{"Q_id": "Q100", "aliases": ["Ormsby Town"], "demonyms": ["Ormsbian"]}]


def build(tmp_path, *extra):
    (tmp_path / "dev.json").write_text(json.dumps(DEV))
    main(["--dev", str(tmp_path / "dev.json"), "--out", str(tmp_path / "out"), *extra])
    read = lambda name: [json.loads(line) for line in (tmp_path / "out" / name).read_text().splitlines()]  # noqa
    return read("questions.jsonl"), read("corpus.jsonl")


def test_corpus_is_the_distinct_context_paragraphs(tmp_path):
    _, corpus = build(tmp_path)
    assert corpus == [
        {"id": "2wd-000000", "title": "Kestrel Works", "text": "Kestrel Works makes pumps. It was founded by Ida Brenn."},
        {"id": "2wd-000001", "title": "Ida Brenn", "text": "Ida Brenn was an engineer. She was born in Ormsby."},
        {"id": "2wd-000002", "title": "Tull", "text": "Tull is a village."},
        {"id": "2wd-000003", "title": "Ormsby", "text": "Ormsby dates from 1201."},
    ]


def test_questions_carry_gold_titles_and_their_passages(tmp_path):
    questions, _ = build(tmp_path)
    assert questions[0] == {
        "id": "q1", "type": "compositional", "question": DEV[0]["question"], "answer": "Ormsby", "answer_id": "Q100",
        "aliases": [], "supporting_facts": [["Kestrel Works", 1], ["Ida Brenn", 1]],
        "gold_titles": ["Kestrel Works", "Ida Brenn"], "corpus_ids": ["2wd-000000", "2wd-000001"],
        "gold_title_method": "exact", "evidences": DEV[0]["evidences"], "context": None}
    assert questions[1]["gold_titles"] == ["Ormsby", "Tull"] and questions[1]["corpus_ids"] == ["2wd-000003",
                                                                                                 "2wd-000002"]


def test_the_pair_loads_as_a_dataset(tmp_path):
    (tmp_path / "aliases.json").write_text("".join(json.dumps(r) + "\n" for r in ALIASES))
    build(tmp_path, "--aliases", str(tmp_path / "aliases.json"))
    questions = load_questions(tmp_path / "out" / "questions.jsonl", "all")
    assert [q.answers for q in questions] == [["Ormsby", "Ormsby Town", "Ormsbian"], ["yes"], ["Olaf Brenn"]]
    assert [q.type for q in questions] == ["compositional", "comparison", "inference"]
    titles = {p.id: p.title for p in load_corpus(tmp_path / "out" / "corpus.jsonl")}
    assert all(set(q.gold_titles) <= set(titles.values()) for q in questions)


def test_ids_and_limit_choose_and_order_questions(tmp_path):
    (tmp_path / "ids.txt").write_text("q3\nq1\n")
    questions, corpus = build(tmp_path, "--ids", str(tmp_path / "ids.txt"))
    assert [q["id"] for q in questions] == ["q3", "q1"]
    assert [p["title"] for p in corpus] == ["Ida Brenn", "Kestrel Works", "Tull"]
    questions, _ = build(tmp_path, "--limit", "1")
    assert [q["id"] for q in questions] == ["q1"]


def test_clear_errors(tmp_path, capsys):
    (tmp_path / "ids.txt").write_text("q9\n")
    with pytest.raises(SystemExit):
        build(tmp_path, "--ids", str(tmp_path / "ids.txt"))
    assert "1 of 1 ids are not in the dev file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--dev", str(tmp_path / "nope.json"), "--out", str(tmp_path / "out")])
    assert "nope.json" in capsys.readouterr().err
