"""The CPU a measurement or a report ran on, by the name the kernel gives it (standard library
only: the real-mode, profiling and experiment headers all read it here)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    """/proc/cpuinfo's first `model name`, else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
