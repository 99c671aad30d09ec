"""Running one part of the GPU check as a child process under a time box, its output logged to a file."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class CommandResult:
    returncode: int | None  # None: killed at the time box
    seconds: float
    log: Path

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
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
