"""A 32-replica cluster behind a least-loaded router: wall time and peak memory.

`dsim run --trace synthetic:rate=400,n=1000000,prompt=512,output=128 --replicas 32
--router least-loaded --policy dspark` on the 2023-engine H200 Qwen3-8B estimate (where the
target was set, so that a change of the default engine does not move it), in a fresh
process so its peak RSS is its own. Target: under 600 s and 4 GB. `--n` runs a smaller trace
(same rate, so the same per-step load) to extrapolate from when the machine is busy.
Run: .venv/bin/python benchmarks/bench_cluster.py [--n 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PROFILE_2023 = "profiles/h200-qwen3-8b-vllm2023-roofline.csv"


def one(n: int) -> dict:
    from dsim.run import RunSpec, simulate

    trace = f"synthetic:rate=400,n={n},prompt=512,output=128"
    spec = RunSpec(
        trace=trace, policy="dspark", replicas=32, router="least-loaded", profile=PROFILE_2023
    )
    start, cpu0 = time.perf_counter(), time.process_time()
    s = simulate(spec).summary
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    return {
        "requests": s["requests"],
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "steps": s["steps"],
        "us_per_step_wall": round(wall / s["steps"] * 1e6, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "throughput_tok_s": round(s["throughput_tok_s"]),
        "mean_batch_size": round(s["mean_batch_size"], 1),
        "load_imbalance": round(s["load_imbalance"], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="requests in the trace")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(args.n)))
        return
    before = os.getloadavg()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--n", str(args.n)]
    env = {"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(cmd, cwd=HERE, env=env, check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    result["load_before_after"] = [round(before[0], 2), round(os.getloadavg()[0], 2)]
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
