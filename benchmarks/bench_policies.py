"""Scheduler cost per round at R = 32, 128, 256 requests, gamma = 7.

Target: dspark_lengths under 100 microseconds per call at R = 256 (docs/design.md,
The dspark scheduler: the scheduler runs every round). The dspark figures with an SPS table (what a
real engine would precompute) are the scheduler's own time behind `--sched-cost auto`
(dsim/engine/config.py). Run: .venv/bin/python benchmarks/bench_policies.py
"""

from __future__ import annotations

import timeit

import numpy as np

from dsim.hardware.latency import LatencyModel
from dsim.policies import dspark_lengths, parse_policy

GAMMA = 7


def main() -> None:
    rng = np.random.default_rng(0)
    model = LatencyModel.from_csv("profiles/h200-qwen3-8b-vllm2023-roofline.csv")
    threshold = parse_policy("threshold:0.5")
    for r in (32, 128, 256):
        conf = rng.uniform(0.3, 1.0, size=(r, GAMMA))
        table = 1.0 / model.latency(np.arange(r * (GAMMA + 1) + 1), r, 2048.0)

        def callable_sps(b, r=r):  # what the engine hands a policy: a mixed step's SPS at R
            return 1.0 / model.step(b, r, 2048.0, 512, 1, 1024.0)

        sla = 0.8 * float((1 + np.cumprod(conf, 1)[:, :3].sum(1)).mean() * table[r * 4])
        cases = {
            "dspark, SPS table": lambda c=conf, t=table: dspark_lengths(c, t),
            "dspark, profile callable": lambda c=conf, f=callable_sps: dspark_lengths(c, f),
            "dspark, SPS table, SLA": lambda c=conf, t=table, s=sla: dspark_lengths(c, t, s),
            "threshold:0.5": lambda c=conf, t=table: threshold.lengths(c, t, None),
        }
        for label, call in cases.items():
            n = 500
            best = min(timeit.repeat(call, number=n, repeat=5)) / n
            print(f"R={r:3d} gamma={GAMMA} {label}: {best * 1e6:.1f} us/call")


if __name__ == "__main__":
    main()
