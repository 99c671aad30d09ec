"""The parts of the GPU check. Each runs child processes under its time box, their output logged to a file, and
returns its section of gpu_check.json; a part that fails or runs out of time says so in its `status` and the check
goes on."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from ..bench.metrics import ratios
from .plan import BenchPart

MIN_START_S = 10  # a part with less time left than this is skipped


@dataclass
class CommandResult:
    returncode: int | None  # None: killed at the time box
    seconds: float
    log: Path

    @property
    def status(self) -> str:
        if self.returncode is None:
            return f"timed out after {self.seconds:.0f} s"
        return "ok" if self.returncode == 0 else f"failed (exit {self.returncode})"

    def section(self, **fields) -> dict:
        """A part's gpu_check.json section: the status, `fields`, and the log's tail unless the command succeeded."""
        return {"status": self.status, **fields, **({"tail": self.tail()} if self.returncode != 0 else {})}

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


def run_command(args: list[str], timeout_s: float, log: Path, env: dict[str, str] | None = None) -> CommandResult:
    """`args` in its own process group (so the processes it spawns go with it when the box runs out)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as out:
        out.write("$ " + " ".join(args) + "\n")
        out.flush()
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        try:
            code: int | None = proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return CommandResult(code, round(time.perf_counter() - start, 1), log)


def tests_part(paths: tuple[str, ...], device: str, box_s: float, folder: Path) -> dict:
    """The engine tests with engines and their transformers references on `device` (float32 exactness)."""
    junit = folder / "tests.xml"
    workers = ["-n", "4"] if device == "cuda" and importlib.util.find_spec("xdist") else []
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "orthrus_rag.eval.gpu.missing_models", "-m",
            "not shipped", f"--junitxml={junit}", *workers, *paths]
    result = run_command(args, box_s, folder / "tests.log", env={"ORTHRUS_TEST_DEVICE": device})
    counts = junit_counts(junit) if junit.is_file() else progress_counts(result.log)
    found = re.findall(r"(\d+) deselected", result.log.read_text(errors="replace")) if result.log.is_file() else []
    return result.section(device=device, paths=list(paths), seconds=result.seconds,
                          workers=int(workers[1]) if workers else 1, **counts,
                          deselected=int(found[-1]) if found else 0)


def junit_counts(junit: Path) -> dict:
    suite = ET.parse(junit).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed_tests"] = []
    for case in suite.iter("testcase"):
        failure = case.find("failure")
        problem = failure if failure is not None else case.find("error")
        if problem is not None:
            first = next(iter((problem.get("message") or "").splitlines()), "")[:300]
            counts["failed_tests"].append(f"{case.get('classname')}::{case.get('name')}: {first}")
    return counts


def progress_counts(log: Path) -> dict:
    """Counts read from pytest's progress characters, for a run stopped before it wrote its report."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    marks = "".join(m.group(1) for m in re.finditer(r"^([.FEsx]+)\s*(?:\[\s*\d+%\])?$", text, re.MULTILINE))
    return {"passed": marks.count("."), "failures": marks.count("F"), "errors": marks.count("E"),
            "skipped": marks.count("s"), "incomplete": True}


def steps_part(backend: str, overrides: tuple[str, ...], box_s: float, folder: Path) -> dict:
    """`workload=steps` with one attention backend."""
    overrides = (*overrides, f"runtime.attention_backend={backend}")
    run_dir = folder / f"steps_{backend}"
    args = [sys.executable, "-m", "orthrus_rag.eval.bench.cli", "workload=steps", *overrides,
            f"hydra.run.dir={run_dir}"]
    result = run_command(args, box_s, folder / f"steps_{backend}.log")
    bench = _read_json(run_dir / "bench.json") or {}
    return result.section(seconds=result.seconds, overrides=list(overrides),
                          **{k: bench[k] for k in ("steps", "tokens", "read_gb_s", "weight_bytes") if k in bench})


# ---- benchmarks, one Hydra job per mode -----------------------------------------------------------------------------
def bench_modes(part: BenchPart, extra: tuple[str, ...], time_left, folder: Path) -> tuple[dict, dict]:
    """Runs `orthrus-rag-bench` once per mode, each in its own process (so no mode inherits another's device
    memory), within the part's time box. Returns ({mode: bench.json}, {mode: why it has none})."""
    results, problems, box = {}, {}, part.box_s
    for mode in part.modes:
        if min(box, time_left()) <= MIN_START_S:
            problems[mode] = "not run: time box spent"
            continue
        sweep = folder / part.name / mode
        args = [sys.executable, "-m", "orthrus_rag.eval.bench.cli", "-m", *part.overrides, *extra, f"modes=[{mode}]",
                f"hydra.sweep.dir={sweep}"]
        result = run_command(args, min(box, time_left()), folder / part.name / f"{mode}.log")
        box -= result.seconds
        for path in sorted(sweep.glob("*/bench.json")):
            if bench := _read_json(path):
                results[bench["config"]["modes"][0]] = bench
        if mode not in results:
            problems[mode] = f"{result.status} (log parts/{part.name}/{result.log.name})"
    return results, problems


def _read_json(path: Path) -> dict | None:
    with contextlib.suppress(OSError, json.JSONDecodeError):
        return json.loads(path.read_text())
    return None


MIXED_KEYS = ("rps", "embed_rps", "gen_rps", "p50_s", "p99_s", "requests", "wall_s")


def mixed_part(part: BenchPart, time_left, folder: Path) -> dict:
    benches, problems = bench_modes(part, (), time_left, folder)
    modes = {m: {k: b["modes"][m].get(k) for k in MIXED_KEYS} for m, b in benches.items()}
    section = {"status": _overall(part, benches, problems), "title": part.title, "overrides": list(part.overrides),
               "modes": modes, "ratios": rps_ratios(modes), "problems": problems}
    phases = {}
    for mode, bench in benches.items():
        for name, phase in bench.get("phases", {}).items():
            phases.setdefault(name, {})[mode] = {k: phase["modes"][mode].get(k) for k in MIXED_KEYS}
    if phases:
        section["phases"] = {name: {"modes": by_mode, "ratios": rps_ratios(by_mode)} for name, by_mode in phases.items()}
    if benches:
        section["engine_config"] = next(iter(benches.values()))["config"]["engine"]
    return section


def rps_ratios(modes: dict) -> dict:
    return {key: None if ratio is None else round(ratio, 3) for key, ratio in ratios(modes).items()}


RAG_KEYS = ("qps", "p50_s", "p90_s", "p99_s", "mean_s", "n", "wall_s", "goodput", "calls", "time_share")


def rag_part(part: BenchPart, rates: tuple[float, ...], time_left, folder: Path) -> dict:
    benches, problems = bench_modes(part, ("rates=[" + ",".join(str(r) for r in rates) + "]",), time_left, folder)
    by_rate: dict[str, dict] = {}
    for mode, bench in benches.items():
        for load in bench["sweep"]:
            by_rate.setdefault(str(load["rate"]), {})[mode] = {k: load["modes"][mode].get(k) for k in RAG_KEYS}
    return {"status": _overall(part, benches, problems), "title": part.title, "overrides": list(part.overrides),
            "rates": list(rates), "by_rate": {rate: {"modes": modes, "p99_reduction_vs_isolated":
                                                     p99_reduction(modes)} for rate, modes in by_rate.items()},
            "problems": problems,
            "note": "dummy weights: latency only, the answers are meaningless (accuracy is not measured)"}


def p99_reduction(modes: dict) -> float | None:
    hetero, isolated = modes.get("hetero", {}).get("p99_s"), modes.get("isolated", {}).get("p99_s")
    return round(1 - hetero / isolated, 3) if hetero and isolated else None


def _overall(part: BenchPart, benches: dict, problems: dict) -> str:
    if not problems:
        return "ok"
    return f"partial ({len(benches)} of {len(part.modes)} modes)" if benches else "failed"
