"""The run facts results.json carries for the leaderboard header."""
import json
import os
import subprocess
import sys
from pathlib import Path

from orthrus_rag.eval.experiment.datasets import DatasetSpec
from orthrus_rag.eval.experiment.run_info import data_facts, environment, git_state

ROOT = Path(__file__).resolve().parents[2]


def test_environment_names_machine_versions_commit_and_date():
    from importlib.metadata import version

    facts = environment()
    assert facts["torch"] == version("torch") and facts["transformers"] == version("transformers")
    assert facts["machine"]["cores"] == os.cpu_count() and facts["machine"]["cpu"]
    assert len(facts["machine"]["load_avg"]) == 3
    assert facts["date"].endswith("+00:00") and facts["date"][:2] == "20"
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert facts["git_commit"] == head.strip() and isinstance(facts["git_dirty"], bool)
    json.dumps(facts)


def test_git_state_outside_a_checkout(tmp_path):
    assert git_state(tmp_path) == {"git_commit": None, "git_dirty": None}


def test_data_facts_of_the_demo_set():
    facts = data_facts(DatasetSpec("demo", None, None, "test", None), answered=3)
    assert facts["questions"] == {"file": "questions.jsonl", "split": "test", "answered": 3, "split_size": 20,
                                  "total": 30}
    assert facts["corpus"]["file"] == "corpus.jsonl" and facts["corpus"]["passages"] == 152
    assert len(facts["corpus"]["fingerprint"]) >= 8


def test_data_facts_read_the_files_the_run_read(tmp_path, monkeypatch):
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": "?", "answer": "a"}) + "\n"
                                              for i in range(301)))
    monkeypatch.chdir(tmp_path)
    spec = DatasetSpec("mine", "q.jsonl", None, "test", None)  # relative: from where the command ran
    facts = data_facts(spec, answered=1)
    assert facts["questions"] == {"file": "q.jsonl", "split": "test", "answered": 1, "split_size": 1, "total": 301}
    assert facts["corpus"]["passages"] == 152  # the demo corpus: the spec's null corpus


def test_data_facts_of_a_hugging_face_dataset():
    facts = data_facts(DatasetSpec("hub", "hf:owner/name", None, "dev", None), answered=2)
    assert facts["questions"] == {"file": "hf:owner/name", "split": "dev", "answered": 2, "split_size": None,
                                  "total": None}


def test_unreadable_data_leaves_sizes_unknown(tmp_path):
    facts = data_facts(DatasetSpec("gone", tmp_path / "q.jsonl", tmp_path / "c.jsonl", "dev", None), answered=0)
    assert facts["questions"]["split_size"] is None and facts["corpus"]["passages"] is None


def test_import_does_not_load_torch():
    code = "import sys, orthrus_rag.eval.experiment.run_info; sys.exit(3 if 'torch' in sys.modules else 0)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0
