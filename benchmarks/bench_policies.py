"""Scheduler cost per round: dspark_lengths for R = 256 requests, gamma = 7.

Target: under 100 microseconds per call (DESIGN.md 2: the scheduler runs every round).
Run: .venv/bin/python benchmarks/bench_policies.py
"""

from __future__ import annotations

import timeit

import numpy as np

from dsim.hardware.latency import LatencyModel
from dsim.policies import dspark_lengths

R, GAMMA = 256, 7


def main() -> None:
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.3, 1.0, size=(R, GAMMA))
    model = LatencyModel.from_csv("profiles/h200-qwen3-8b-roofline.csv")
    table = 1.0 / model.latency(np.arange(R * (GAMMA + 1) + 1), R, 2048.0)

    def callable_sps(b):  # what the engine hands a policy: a mixed step's SPS at fixed R
        return 1.0 / model.step(b, R, 2048.0, 512, 1, 1024.0)

    for label, sps in (("table", table), ("profile callable", callable_sps)):
        n = 2000
        best = min(timeit.repeat(lambda s=sps: dspark_lengths(conf, s), number=n, repeat=5)) / n
        print(f"dspark_lengths R={R} gamma={GAMMA} sps={label}: {best * 1e6:.1f} us/call")


if __name__ == "__main__":
    main()
