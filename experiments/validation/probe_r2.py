"""Probe of v11's fixed:4 miss: real mode's target pass at R = 1, 2, 4 sequences x q = 2, 4, 5,
6, 8 tokens each (context 512), beside v11's step model, which was fitted on R = 1, 4, 16 and
q = 1, 2, 4, 8 only. Timed as the profile times (round_robin: 2 warm-ups, 7 rounds, 1 thread,
wall clock); run on a quiet machine.
Usage: .venv/bin/python experiments/validation/probe_r2.py --profile V11/profile.csv > probe_r2.txt
(v11's and v12's reports are in commit 336d5cc:
`git show 336d5cc:experiments/validation/v11/profile.csv`; the default profile is v28's).
probe_r3.txt: --seqs 1,2,3,4 against v12's model, which measured R = 2 and q = 5.
Ragged batches, as dspark verifies them: --shapes 3+3,1+5 (q per sequence; column q prints the
shape), e.g. probe_ragged.txt.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path

import numpy as np
import torch

from dsim.hardware.latency import LatencyModel
from dsim.hardware.measure import cpu_timer
from dsim.models.cpu_profile import PassClock, random_target, round_robin

PROFILE = Path(__file__).resolve().parent / "v28" / "profile.csv"
CONTEXT = 512


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", default="1,2,4")
    ap.add_argument("--profile", type=Path, default=PROFILE)
    ap.add_argument("--shapes", help="ragged batches instead: q per sequence, e.g. 3+3,1+5")
    args = ap.parse_args()
    if args.shapes:
        shapes = [[int(q) for q in s.split("+")] for s in args.shapes.split(",")]
    else:
        shapes = [[q] * int(r) for r in args.seqs.split(",") for q in (2, 4, 5, 6, 8)]
    torch.set_num_threads(1)
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()}")
    clock = PassClock(random_target("smollm2-135m"), max(map(len, shapes)), 1100)
    steps = [clock.step([(1, q, CONTEXT, False) for q in shape]) for shape in shapes]
    times = round_robin(steps, 7, 2, cpu_timer)
    model = LatencyModel.from_csv(args.profile)
    print(f"# model: {args.profile}")
    print("R q B measured_ms model_ms model/measured-1")
    for shape, t in zip(shapes, times, strict=True):
        r, b = len(shape), sum(shape)
        q = shape[0] if len(set(shape)) == 1 else "+".join(map(str, shape))
        measured = float(np.median(t)) * 1e3
        predicted = float(model.latency(b, r, CONTEXT)) * 1e3
        error = predicted / measured - 1
        print(r, q, b, f"{measured:.1f}", f"{predicted:.1f}", f"{error:+.3f}")


if __name__ == "__main__":
    main()
