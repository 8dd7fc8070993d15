"""Probe of one cause of the one-sequence cells' price bias (issue 55, after v43): does a pass
time depend on the KV pool's layout, which the profile and the runs do not share?

The profile times its passes on one pool sized for its whole grid (`PassClock`: 20 slots of
1,421 tokens in v43's grid: 16 + 4 prefill sequences, the longest context plus the widest
block); a run's backend opens each request's cache at prompt + output cap + gamma + 1 tokens
and grows the pool to the few requests a light load holds. Attention reads each slot as a
strided view of the pool, so the strides differ. This times the cells (1, 1), (1, 2), (1, 5) at
context 128 in three pools, in rounds over all nine points (`round_robin`, 1 warm-up, wall
clock, 1 thread, random weights, as the validation's profile): the profile's, a run's (4 slots
of 384), and a run's with a power-of-two capacity (4 of 1,024); and prints each cell's median
per pool and the ratios to the profile's pool.
Usage: .venv/bin/python experiments/validation/probe_pool.py 400 > probe_pool.txt
"""

from __future__ import annotations

import datetime as dt
import os
import sys

import numpy as np
import torch

from dsim.hardware.measure import CPU_TIMERS
from dsim.models.cpu_profile import PassClock, random_target, round_robin

CELLS = ((1, 1), (1, 2), (1, 5))
CONTEXT = 128
POOLS = {"profile": (20, 1421), "run": (4, 384), "run_pow2": (4, 1024)}  # (slots, capacity)


def main(rounds: int) -> None:
    torch.set_num_threads(1)
    target = random_target("smollm2-135m")
    clocks = {name: PassClock(target, *shape) for name, shape in POOLS.items()}
    points = [(name, cell) for name in POOLS for cell in CELLS]
    steps = [clocks[name].step([(r, q, CONTEXT, False)]) for name, (r, q) in points]
    times = round_robin(steps, rounds, 1, CPU_TIMERS["wall"])
    median = {p: float(np.median(t)) * 1e3 for p, t in zip(points, times, strict=True)}
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()}")
    print(f"# {rounds} rounds, context {CONTEXT}; pools (slots, capacity): {POOLS}")
    for cell in CELLS:
        base = median[("profile", cell)]
        parts = [f"{name} {median[(name, cell)]:7.2f} ms" for name in POOLS]
        ratios = [f"{name}/profile {median[(name, cell)] / base:.3f}" for name in POOLS][1:]
        print(f"{cell}: " + "  ".join(parts + ratios))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
