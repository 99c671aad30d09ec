"""The prediction log: whatever byte a kill stops it at, the rows before are read back and the cut one is skipped."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orthrus_rag.eval.experiment import predictions
from orthrus_rag.eval.experiment.predictions import FSYNC_EVERY, LogFormatError, PredictionLog

ROWS = [{"id": f"q{i}", "prediction": text, "error": None}
        for i, text in enumerate(["Åström", "東京 and 大阪", "plain", "emoji 🦜 at the end 🦜"])]


def log_bytes(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(log_bytes(ROWS))))
def test_a_log_cut_at_any_byte_gives_the_whole_rows_before_the_cut(tmp_path_factory, cut):
    folder = tmp_path_factory.mktemp("log")
    data = log_bytes(ROWS)
    (folder / "predictions.jsonl").write_bytes(data[:cut])
    contents = PredictionLog(folder).read()
    whole = data[:cut].count(b"\n")
    assert list(contents.rows.values())[:whole] == ROWS[:whole]
    torn = data[:cut].rsplit(b"\n", 1)[-1]
    if torn:  # the cut line is skipped and reported, unless the cut fell just before its newline
        complete = torn == data.split(b"\n")[whole]
        assert len(contents.rows) == whole + complete
        assert [n for n, _ in contents.skipped] == ([] if complete else [whole + 1])
    else:
        assert len(contents.rows) == whole and not contents.skipped


def test_a_bad_line_before_the_last_is_an_error_naming_it(tmp_path):
    data = log_bytes(ROWS[:1]) + b"\xff\xfe\n" + log_bytes(ROWS[1:])
    (tmp_path / "predictions.jsonl").write_bytes(data)
    with pytest.raises(LogFormatError, match="line 2 of .* is not a prediction row"):
        PredictionLog(tmp_path).read()


def test_a_later_row_replaces_an_earlier_one_in_its_place(tmp_path):
    failed, retried = {"id": "q0", "error": "boom"}, {"id": "q0", "error": None, "prediction": "x"}
    (tmp_path / "predictions.jsonl").write_bytes(log_bytes([failed, ROWS[1], retried]))
    assert list(PredictionLog(tmp_path).read().rows.values()) == [retried, ROWS[1]]


def test_rows_are_synced_to_disk_every_few_and_at_the_end(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(predictions.os, "fsync", lambda fd: synced.append(fd))
    log = PredictionLog(tmp_path)
    log.start([])
    synced.clear()  # the atomic rewrite syncs its own file
    for i in range(2 * FSYNC_EVERY + 1):
        log.append({"id": f"q{i}"})
    assert len(synced) == 2
    log.close()
    assert len(synced) == 3 and len(log.read().rows) == 2 * FSYNC_EVERY + 1
