"""Probe of v11's fixed:4 miss: real mode's target pass at R = 1, 2, 4 sequences x q = 2, 4, 5,
6, 8 tokens each (context 512), beside v11's step model, which was fitted on R = 1, 4, 16 and
q = 1, 2, 4, 8 only. Timed as the profile times (round_robin: 2 warm-ups, 7 rounds, 1 thread,
wall clock); run on a quiet machine.
Usage: .venv/bin/python experiments/validation/probe_r2.py > experiments/validation/probe_r2.txt
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import numpy as np
import torch

from dsim.hardware.latency import LatencyModel
from dsim.hardware.measure import cpu_timer
from dsim.real.profile import PassClock, random_target, round_robin

PROFILE = Path(__file__).resolve().parent / "v11" / "profile.csv"
POINTS = [(r, q) for r in (1, 2, 4) for q in (2, 4, 5, 6, 8)]
CONTEXT = 512


def main() -> None:
    torch.set_num_threads(1)
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()}")
    clock = PassClock(random_target("smollm2-135m"), max(r for r, _ in POINTS), 1100)
    steps = [clock.step([(r, q, CONTEXT, False)]) for r, q in POINTS]
    times = round_robin(steps, 7, 2, cpu_timer)
    model = LatencyModel.from_csv(PROFILE)
    print("R q B measured_ms v11_model_ms model/measured-1")
    for (r, q), t in zip(POINTS, times, strict=True):
        measured = float(np.median(t)) * 1e3
        predicted = float(model.latency(r * q, r, CONTEXT)) * 1e3
        error = predicted / measured - 1
        print(r, q, r * q, f"{measured:.1f}", f"{predicted:.1f}", f"{error:+.3f}")


if __name__ == "__main__":
    main()
