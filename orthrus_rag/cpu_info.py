"""The CPU's name, without importing torch (the run record and the attention choice read it)."""
from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The `model name` line of /proc/cpuinfo (Linux), else what the platform module reports."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"
