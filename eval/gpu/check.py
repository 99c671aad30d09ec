"""The GPU check: engine tests on CUDA, the step micro-benchmark, the mixed benchmark and the rag benchmark, on
dummy models, each part time-boxed; writes gpu_check.json and gpu_check.md into --out after every part. How to run
it: docs/benchmarks.md (The GPU check). gpu_check.json: {"dry_run", "started", "seconds", "plan", "machine", "tests",
"steps": {attention backend}, "mixed": {"backbone", "minilm"}, "rag"}; each part has a `status` (ok, partial, failed,
timed out, skipped).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from .parts import MIN_START_S, mixed_part, rag_part, steps_part, tests_part
from .plan import Plan, load_plan
from .report import render

PARTS = ("tests", "steps", "mixed", "rag")


class Check:
    def __init__(self, plan: Plan, out: Path, dry_run: bool, budget_s: float):
        self.out, self.parts = out, out / "parts"
        self.start = time.perf_counter()
        self.deadline = self.start + budget_s
        self.result: dict = {"dry_run": dry_run, "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                             "budget_s": budget_s, "plan": asdict(plan)}

    def time_left(self) -> float:
        return self.deadline - time.perf_counter()

    def box(self, seconds: float) -> float:
        return min(seconds, self.time_left())

    def record(self, key: str, section: dict, sub: str | None = None) -> None:
        (self.result.setdefault(key, {}) if sub else self.result)[sub or key] = section
        self.result["seconds"] = round(time.perf_counter() - self.start, 1)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_check.json").write_text(json.dumps(self.result, indent=2, default=str) + "\n")
        (self.out / "gpu_check.md").write_text(render(self.result))
        print(f"[gpu-check] {sub or key}: {section.get('status')} ({self.result['seconds']:.0f} s)", flush=True)

    def run_part(self, key: str, work, sub: str | None = None) -> None:
        if self.time_left() < MIN_START_S:
            return self.record(key, {"status": "skipped: time budget spent"}, sub)
        try:
            section = work()
        except Exception as error:  # a part that breaks is recorded; the check goes on
            section = {"status": f"failed: {type(error).__name__}: {error}"}
        self.record(key, section, sub)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eval/gpu/check.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny models (checks the script itself)")
    parser.add_argument("--out", type=Path, default=Path("gpu-check"), help="folder for gpu_check.json/.md")
    parser.add_argument("--budget", type=float, default=None, help="seconds for all parts (default: the plan's)")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated parts to run, in the plan's order (default: {','.join(PARTS)})")
    args = parser.parse_args(argv)
    args.parts = args.parts.split(",")
    if unknown := set(args.parts) - set(PARTS):
        parser.error(f"unknown parts {sorted(unknown)}; choose from {','.join(PARTS)}")
    plan = load_plan("dry" if args.dry_run else "full")
    check = Check(plan, args.out, args.dry_run, args.budget or plan.budget_s)
    device = "cpu" if args.dry_run else "cuda"
    from .machine import machine_info

    check.run_part("machine", machine_info)
    if not args.dry_run and not check.result["machine"].get("cuda"):
        print("[gpu-check] torch sees no CUDA device: nothing run (on a CPU use --dry-run)", file=sys.stderr)
        return 2
    if "tests" in args.parts:
        check.run_part("tests", lambda: tests_part(plan.test_paths, device, check.box(plan.tests_box_s), check.parts))
    for backend in plan.steps_backends if "steps" in args.parts else ():
        check.run_part("steps", lambda: steps_part(backend, plan.steps_overrides, check.box(plan.steps_box_s),
                                                   check.parts), sub=backend)
    for part in plan.mixed if "mixed" in args.parts else ():
        check.run_part("mixed", lambda: mixed_part(part, check.time_left, check.parts), sub=part.name)
    if "rag" in args.parts:
        check.run_part("rag", lambda: rag_part(plan.rag, plan.rates, check.time_left, check.parts))
    print(f"[gpu-check] wrote {args.out / 'gpu_check.json'} and {args.out / 'gpu_check.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
