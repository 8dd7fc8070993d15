"""Probe of the one-sequence cells' price bias (issue 55, after v43): which of the three ways a
run's target pass differs from the profile's moves the cells (1, 1), (1, 2), (1, 5) apart?

`dsim profile --device cpu` times real mode's target pass on random weights (the validation's
profiling phase on the real ones), keeping no drafter features, each pass after another target
pass (`round_robin` over the grid). A run's pass has the real weights, keeps the drafter's
input layers (`RaggedTarget(target, layers)`: the model returns
every hidden state) and follows the drafter's pass of the same round. Five conditions: A the
profile's way; B real weights; B' B with a drafter pass (markov, gamma 7, one sequence, its
window of 16) run untimed just before each timed pass, on B's pass clock; C B with the
drafter's layers kept; D C with the drafter pass, on C's pass clock. Pairs on one clock (B, B'
and C, D) share the KV pool and the pass objects, so what separates them is the drafter pass
alone. The three cells at context 256 under the five conditions, in rounds over all fifteen
points (`round_robin`, 1 warm-up, wall clock, 1 thread), each clock on a run-sized pool (4
slots of 512: the pool's layout is ruled out, `probe_pool.py`). It prints each cell's median
per condition and over A, and each condition's ratios (1, 2) / (1, 1) and (1, 5) / (1, 2): a
cause of the studies' pattern (the runs' (1, 1) cheaper than priced, (1, 2) dearer, (1, 5)
cheaper) moves those ratios, not every cell alike.
Usage: PYTHONPATH=. .venv/bin/python experiments/validation/probe_insitu.py 300
"""

from __future__ import annotations

import datetime as dt
import os
import sys

import numpy as np
import torch

from dsim.hardware.measure import CPU_TIMERS
from dsim.models.cpu_profile import PassClock, random_target, round_robin
from dsim.models.drafters import input_layers
from dsim.models.ragged import RaggedTarget
from dsim.real.runner import load_models
from dsim.validation.profiles import drafter_before
from dsim.validation.settings import Settings

CELLS = ((1, 1), (1, 2), (1, 5))
CONTEXT = 256
POOL = (4, 512)  # (slots, capacity)
# (name, pass clock, a drafter pass before each timed pass?)
CONDITIONS = (
    ("A profile", "random", False),
    ("B real weights", "real", False),
    ("B' B + drafter pass", "real", True),
    ("C + drafter layers", "layers", False),
    ("D C + drafter pass", "layers", True),
)


class LayersClock(PassClock):
    """`PassClock` whose pass keeps the drafter's input layers, as a run's backend does."""

    def __init__(self, target, slots: int, capacity: int, layers: list[int]) -> None:
        super().__init__(target, slots, capacity)
        self.passes = RaggedTarget(target, layers)
        for rid in range(slots):
            self.passes.store.open(rid, capacity)


def main(rounds: int) -> None:
    torch.set_num_threads(1)
    s = Settings()
    target, drafter = load_models(s.target, s.drafter)
    layers = input_layers(drafter, target)
    before = drafter_before(drafter)
    clocks = {
        "random": PassClock(random_target(s.target), *POOL),
        "real": PassClock(target, *POOL),
        "layers": LayersClock(target, *POOL, layers),
    }
    points = [(cond, cell) for cond in CONDITIONS for cell in CELLS]
    steps = []
    for (_, clock, drafted), (r, q) in points:
        step = clocks[clock].step([(r, q, CONTEXT, False)])
        steps.append(before.preceding(step, r, []) if drafted else step)
    times = round_robin(steps, rounds, 1, CPU_TIMERS["wall"])
    median = {p: float(np.median(t)) * 1e3 for p, t in zip(points, times, strict=True)}
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()}")
    print(f"# {rounds} rounds, context {CONTEXT}, pool (slots, capacity) {POOL}")
    for cell in CELLS:
        base = median[(CONDITIONS[0], cell)]
        parts = [f"{c[0].split()[0]} {median[(c, cell)]:7.2f} ms" for c in CONDITIONS]
        ratios = [f"{c[0].split()[0]}/A {median[(c, cell)] / base:.3f}" for c in CONDITIONS[1:]]
        print(f"{cell}: " + "  ".join(parts + ratios))
    for cond in CONDITIONS:
        one, two, five = (median[(cond, cell)] for cell in CELLS)
        print(f"{cond[0]}: (1, 2)/(1, 1) {two / one:.4f}  (1, 5)/(1, 2) {five / two:.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
