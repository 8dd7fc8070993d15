"""Probe of the small-batch cells' noise (issue 55, after v37): does a cell's median converge
with more repeats in one process, or does each process keep an offset of its own?

The light runs spend 86-89% of their decode time at one sequence and the rest at two
(v34-v37), and the real runs' step ratio of a 5-token verify over a 2-token one is 0.970-0.988
across those four studies, where their profiles' ratio is 0.947-1.035. If the profile's cells
are i.i.d. noisy samples, more repeats close that; if each process (its allocations, its
kernels' choices) keeps its own offset, they do not. This times the cells R <= 2, q <= 8 and
(1, 11), (1, 13) at context 128, in rounds (`round_robin`, 1 warm-up, wall clock, 1 thread, as
the validation's profile), `--repeats` rounds in each of `--processes` fresh processes, and
prints per process the ratios from its first 5 repeats (what the profile takes today) and from
all of them, and their spread across processes beside the spread one process's own samples
predict (bootstrap). Only a subset of the profile's grid: the shapes timed between two
repeats of a cell are not the profile's.
Usage: .venv/bin/python experiments/validation/probe_repeats.py > probe_repeats.txt
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys

import numpy as np

CELLS = [(r, q) for r in (1, 2) for q in range(1, 9)] + [(1, 11), (1, 13)]
CONTEXT = 128
RATIOS = (((1, 5), (1, 2)), ((1, 4), (1, 2)), ((1, 3), (1, 2)), ((2, 5), (1, 2)))
FIRST = 5  # the repeats a validation profile takes


def child(repeats: int) -> None:
    """One process's times (seconds, cells x repeats) as JSON on stdout."""
    import torch

    from dsim.hardware.measure import CPU_TIMERS
    from dsim.models.cpu_profile import PassClock, random_target, round_robin

    torch.set_num_threads(1)
    clock = PassClock(random_target("smollm2-135m"), 2, CONTEXT + 16)
    steps = [clock.step([(r, q, CONTEXT, False)]) for r, q in CELLS]
    times = round_robin(steps, repeats, 1, CPU_TIMERS["wall"])
    json.dump(np.array(times).tolist(), sys.stdout)


def ratios(times: np.ndarray) -> dict[str, float]:
    med = dict(zip(CELLS, np.median(times, axis=1), strict=True))
    return {f"{a}/{b}": med[a] / med[b] for a, b in RATIOS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.repeats)
        return
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()}")
    print(f"# {args.processes} processes x {args.repeats} rounds, context {CONTEXT}")
    rng = np.random.default_rng(0)
    first, whole, boot = [], [], []
    for p in range(args.processes):
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--repeats", str(args.repeats)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        t = np.array(json.loads(out.stdout))
        first.append(ratios(t[:, :FIRST]))
        whole.append(ratios(t))
        draws = [ratios(t[:, rng.choice(args.repeats, FIRST)]) for _ in range(400)]
        boot.append({k: float(np.std([d[k] for d in draws])) for k in draws[0]})
        spans = (np.percentile(t, 90, 1) - np.percentile(t, 10, 1)) / np.median(t, 1)
        print(f"process {p}: (1,1) {1e3 * np.median(t[0]):.1f} ms, p10-p90 span of the cells "
              f"{spans.min():.2f}-{spans.max():.2f}")  # fmt: skip
        for k in whole[-1]:
            print(f"  {k}: first {FIRST} {first[-1][k]:.3f}, all {args.repeats} {whole[-1][k]:.3f}")
    print("across processes (sd):")
    for k in whole[0]:
        sd_first = np.std([f[k] for f in first], ddof=1)
        sd_whole = np.std([w[k] for w in whole], ddof=1)
        within = np.mean([b[k] for b in boot])
        print(
            f"  {k}: first {FIRST} {sd_first:.3f}, all {args.repeats} {sd_whole:.3f}; "
            f"one process's median-of-{FIRST} sd (bootstrap) {within:.3f}"
        )


if __name__ == "__main__":
    main()
