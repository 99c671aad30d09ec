"""`orthrus-rag-train-adapter` from the command line: a tiny run writes the adapter folder; bad settings, a missing
model or teacher, and missing files are one-line errors."""
from __future__ import annotations

import json

import pytest

from orthrus_rag.cli.train_adapter import APP, main


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    rows = [{"id": f"p{i}", "title": f"Name{i}", "text": f"Name{i} is a river number {i}."} for i in range(40)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def tiny_run(tiny_llama_dir, corpus, out, *extra: str) -> list[str]:
    return [f"model.name={tiny_llama_dir}", f"output={out}", f"data.corpus={corpus}", "data.questions=null",
            "train.max_steps=2", "train.batch_size=8", "train.held_out=8", "train.checkpoint_every=2",
            "train.last_layers=null", "train.num_threads=1", *extra]


def test_a_tiny_run_writes_the_adapter(run_app, tiny_llama_dir, tiny_encoder_dir, corpus, tmp_path, capsys):
    out = tmp_path / "adapter"
    run_app(main, APP, *tiny_run(tiny_llama_dir, corpus, out, f"train.distill_from={tiny_encoder_dir}",
                                 "train.dtype=bfloat16"))
    meta = json.loads((out / "training.json").read_text())
    assert meta["steps"] == 2 and meta["data"]["pairs_by_kind"] == {"title": 40}
    assert meta["settings"]["dtype"] == "bfloat16" and meta["settings"]["distill_from"] == str(tiny_encoder_dir)
    assert (out / "adapter_model.safetensors").is_file()
    assert "adapter written to" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["train.batch_size=1"], "batch_size must be at least 2"),
    (["train.dtype=float16"], "dtype must be float32 or bfloat16"),
    (["train.distill_from=no-such-teacher"], "model 'no-such-teacher' is neither a shipped model"),
    (["data.corpus=/no/such/corpus.jsonl"], "data.corpus: no file /no/such/corpus.jsonl"),
])
def test_bad_settings_are_one_line_errors(run_app, tiny_llama_dir, corpus, tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        run_app(main, APP, *tiny_run(tiny_llama_dir, corpus, tmp_path / "adapter", *extra))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{APP}: error:") and message in err and "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err


def test_a_missing_model_is_a_one_line_error(run_app, corpus, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_app(main, APP, *tiny_run("no-such-model", corpus, tmp_path / "adapter"))
    err = capsys.readouterr().err.strip()
    assert "model 'no-such-model' is neither a shipped model" in err and len(err.splitlines()) == 1, err
