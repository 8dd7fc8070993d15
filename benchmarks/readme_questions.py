"""The README's five questions run exactly as written, each timed (issue target: under five
minutes of machine time each on two cores), the timings written with the machine and its load.

Each question's commands are the fenced blocks between `<!-- question N -->` and the next marker
in the README's "Answer a question". They run in order, in one bash per question, in a scratch
folder that holds links to the checkout's `traces/`, `profiles/`, `docs/` and `drafters/` (so
the README's relative paths read the checkout's files and its `runs/` is fresh), with the
checkout's `.venv/bin` first on PATH, as a user who ran `make demo` has it.

Run: .venv/bin/python benchmarks/readme_questions.py [--only N ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from dsim.cpu import cpu_name  # noqa: E402

LINKED = ("traces", "profiles", "docs", "drafters")
TARGET_S = 300.0  # five minutes of machine time a question


def questions(readme: str) -> dict[int, str]:
    """Question number -> its commands (every fenced block under its marker, as a script)."""
    section = readme.split("## Answer a question", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"<!-- question (\d) -->", section)[1:]
    found = {}
    for number, body in zip(parts[::2], parts[1::2], strict=True):
        blocks = re.findall(r"```(?:sh)?\n(.*?)```", body, re.S)
        found[int(number)] = "\n".join(b for b in blocks if b.lstrip().startswith("dsim"))
    return found


def run(number: int, script: str, scratch: Path) -> tuple[float, int, str]:
    """(wall seconds, exit code, the output's last lines) of one question's commands."""
    env = {**os.environ, "PATH": f"{HERE / '.venv/bin'}:/usr/bin:/bin", "COLUMNS": "100"}
    env.pop("PYTHONPATH", None)
    start = time.perf_counter()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=scratch, env=env,
                          capture_output=True, text=True)  # fmt: skip
    wall = time.perf_counter() - start
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
    return wall, done.returncode, tail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", type=int, nargs="*", help="question numbers (default: all)")
    ap.add_argument("--out", type=Path, default=HERE / "benchmarks/readme_questions.md")
    args = ap.parse_args()
    found = questions((HERE / "README.md").read_text())
    if sorted(found) != [1, 2, 3, 4, 5]:
        sys.exit(f"README: expected questions 1-5 under <!-- question N -->, got {sorted(found)}")
    rows, before = [], os.getloadavg()
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="readme-questions-") as tmp:
        scratch = Path(tmp)
        for name in LINKED:
            (scratch / name).symlink_to(HERE / name)
        for number in args.only or sorted(found):
            wall, code, tail = run(number, found[number], scratch)
            verdict = "met" if code == 0 and wall < TARGET_S else "MISSED"
            print(f"question {number}: {wall:.0f} s, exit {code}: {verdict}\n{tail}\n", flush=True)
            rows.append(f"| {number} | {wall:.0f} | {code} | {verdict} |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    text = "\n".join([
        "# The README's questions, timed",
        "",
        f"`.venv/bin/python benchmarks/readme_questions.py` at commit {commit}, "
        f"{started:%Y-%m-%d %H:%M} UTC; {cpu_name()}, {os.cpu_count()} cores; load average "
        f"{before[0]:.2f} before, {os.getloadavg()[0]:.2f} after. Target: each question under "
        f"{TARGET_S:.0f} s of machine time, exit 0.",
        "",
        "| question | wall s | exit | target |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
    ])  # fmt: skip
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
