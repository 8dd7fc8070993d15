"""Where a run's engine time goes with and without bursts: wall time inside `_burst` (bursts that
ran, and tries that found none), `step` and `commit`, fixed:3 over the whole Azure conv trace.
Run: .venv/bin/python benchmarks/burst_split.py ROUNDS_PER_PASS (1: round by round)
"""

from __future__ import annotations

import sys
import time

from bench_sim import TRACE

from dsim.engine import replica
from dsim.run import RunSpec, simulate

SPENT: dict[str, list] = {}


def timed(name: str, method):
    """`method` with its wall time added to SPENT[name] (a None result to SPENT[name + ' none'])."""

    def run(*args):
        start = time.perf_counter()
        out = method(*args)
        key = name if out is not None else f"{name} none"
        entry = SPENT.setdefault(key, [0.0, 0])
        entry[0] += time.perf_counter() - start
        entry[1] += 1
        return out

    return run


def main() -> None:
    rounds = int(sys.argv[1])
    for name in ("_burst", "step", "commit"):
        setattr(replica.Replica, name, timed(name, getattr(replica.Replica, name)))
    start = time.perf_counter()
    res = simulate(RunSpec(trace=TRACE, policy="fixed:3", rounds_per_pass=rounds))
    wall, steps = time.perf_counter() - start, res.summary["steps"]
    print(f"rounds_per_pass {rounds}: {wall:.2f} s, {steps} steps")
    for name, (seconds, calls) in SPENT.items():
        per = seconds / calls * 1e6
        print(f"  {name:12s} {calls:7d} calls {seconds:6.2f} s {per:6.1f} us a call")


if __name__ == "__main__":
    main()
