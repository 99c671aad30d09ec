"""Running one part of the GPU check as a child process under a time box, its output logged to a file."""
from __future__ import annotations

import contextlib
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
