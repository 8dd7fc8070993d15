"""Instructions per simulated step, this checkout against COMMIT: a speed figure that other
processes on the machine do not disturb (valgrind counts instructions, not time).

Each side runs the Azure conv trace's windows 0:60 and 0:180 s under `valgrind --tool=cachegrind
--cache-sim=no`; the difference of the two runs' instruction counts over the difference of
their steps is the marginal cost of a step (imports and setup cancel). Instructions are not
time (cache misses and branch mispredictions are not counted) but track it closely for this
interpreter-bound loop. Needs valgrind; about 5-10 minutes per side on the project's VM.
Run: .venv/bin/python benchmarks/bench_instructions.py [--compare 1e9b53c] [POLICY ...]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from bench_sim import HERE, TRACE, checkout, pinned

WINDOWS = ("0:60", "0:180")


def steps(policy: str, window: str) -> None:
    """The child: one run, its step count on stdout."""
    from dsim.run import RunSpec, simulate

    result = simulate(RunSpec(trace=TRACE, policy=policy, window=window, **pinned()))
    print(json.dumps(result.summary["steps"]))


def counted(checkout_dir: Path, policy: str, window: str) -> tuple[int, int]:
    """(steps, instructions) of one run under cachegrind."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    cmd += [sys.executable, str(Path(__file__).resolve()), "--child", policy, window]
    # No bytecode written: a fresh checkout would otherwise compile every module in its first
    # (shorter) window only, which the difference of the windows would charge to its steps
    # (seen here: the same code measured 386k and 353k instructions a step). A fixed hash seed
    # makes a run's instruction count repeatable.
    env = {
        "PYTHONPATH": str(checkout_dir),
        "PATH": "/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }
    out = subprocess.run(cmd, cwd=checkout_dir, env=env, check=True, capture_output=True, text=True)
    refs = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr).group(1)
    return int(out.stdout.split()[-1]), int(refs.replace(",", ""))


def per_step(checkout_dir: Path, policy: str) -> float:
    # One discarded run first: numba keys its on-disk cache by the CPU it sees, and valgrind's
    # is not the machine's, so the first run under valgrind compiles every kernel and writes
    # that cache; counted in the shorter window, it made the marginal cost negative
    # (-1.9M a step).
    counted(checkout_dir, policy, WINDOWS[0])
    (s0, i0), (s1, i1) = (counted(checkout_dir, policy, w) for w in WINDOWS)
    return (i1 - i0) / (s1 - s0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="*", default=["fixed:3"])
    parser.add_argument("--compare", metavar="COMMIT", default="1e9b53c")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        steps(*args.child)
        return
    with checkout(args.compare) as base:
        for policy in args.policies:
            a, b = per_step(base, policy), per_step(HERE, policy)
            print(
                f"{policy}: instructions per step A {args.compare} {a:,.0f}, B this {b:,.0f}, "
                f"B/A {b / a:.3f} (target <= 0.5)",
                flush=True,
            )


if __name__ == "__main__":
    main()
