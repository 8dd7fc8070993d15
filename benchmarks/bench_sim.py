"""Replay the whole Azure conv trace (19,366 requests, ~58 min) with fixed:3 and oracle.

Prints wall time (and CPU time, which other processes on the machine do not inflate),
simulated rounds per wall-second and peak memory of each run. Each policy
runs in a fresh process so its peak RSS is its own. Target: under 20 s and 1 GB per run.
Run: .venv/bin/python benchmarks/bench_sim.py [POLICY ...]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

TRACE = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"


def one(policy: str) -> dict:
    from dsim.run import RunSpec, simulate

    start, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(RunSpec(trace=TRACE, policy=policy))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    s = result.summary
    return {
        "policy": policy,
        "requests": s["requests"],
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),  # robust to other processes sharing the cores
        "steps": s["steps"],
        "steps_per_wall_s": round(s["steps"] / wall),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "throughput_tok_s": round(s["throughput_tok_s"], 1),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(one(sys.argv[2])))
        sys.exit(0)
    for policy in sys.argv[1:] or ["fixed:3", "oracle"]:
        out = subprocess.run(
            [sys.executable, __file__, "--child", policy],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        print(out.strip())
