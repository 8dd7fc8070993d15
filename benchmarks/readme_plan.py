"""The README's `dsim plan` example run exactly as written (in a scratch copy of the checkout's
working directory, so its `runs/plan` is fresh), then its answer's shape checked: one row per
tier and configuration, every tier answered or its closest named, a launch command per winner.

Run: .venv/bin/python benchmarks/readme_plan.py   (minutes: 32 configurations, 2 tiers, 3 seeds)
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent.parent


def example() -> list[str]:
    """The command under the README's `<!-- plan-example -->` marker, as a shell would split it."""
    text = (HERE / "README.md").read_text().split("<!-- plan-example -->", 1)[1]
    block = re.search(r"```\n(.*?)```", text, re.S)[1]
    return shlex.split(block.replace("\\\n", " "))


def main() -> None:
    words = example()
    assert words[:2] == ["dsim", "plan"], words
    with tempfile.TemporaryDirectory(prefix="readme-plan-") as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dsim", *words[1:]], cwd=tmp, check=True,
                       env={"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"})  # fmt: skip
        wall = time.perf_counter() - start
        out = Path(tmp) / words[words.index("--out") + 1]
        table = pd.read_csv(out / "plan.csv")
        report = (out / "report.md").read_text()
    tiers = [words[i + 1].split(":")[0] for i, w in enumerate(words) if w == "--tier"]
    assert list(dict.fromkeys(table["tier"])) == tiers
    assert table.groupby("tier").size().eq(table["config"].nunique()).all()
    for tier in tiers:
        section = report.split(f"## Tier {tier}:")[1].split("## Tier")[0]
        assert "**Best:**" in section or "Closest:" in section, tier
        assert "**Best:**" not in section or "vllm serve" in section or "sglang" in section
    print(f"README plan example: {wall:.0f} s, {table['config'].nunique()} configurations, "
          f"tiers {tiers}: shape as expected")  # fmt: skip


if __name__ == "__main__":
    main()
