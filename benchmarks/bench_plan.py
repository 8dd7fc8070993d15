"""A plan's wall time: 60 configurations (Qwen3-8B on H200 at TP 1 and 2, vLLM and SGLang, one
or two replicas or a 1:1 split, ar, fixed:3, fixed:5, dspark K3 and K5) x 3 SLA tiers x 3 seeds,
2,000 requests a point of the Azure conversation trace, 2 local processes, into a fresh folder
so nothing comes from the cache.

Target: under 15 minutes on two cores (issue 52). Prints the wall time, the points run, the
load average before and after, and each tier's winner.
Run: .venv/bin/python benchmarks/bench_plan.py [--runs 2] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent.parent
LIMIT_S = 900.0
ARGS = (
    "--model", "qwen3-8b", "--gpu", "h200", "--tp", "1,2", "--engine", "vllm,sglang",
    "--replicas", "1,2", "--disagg", "1:1", "--policies", "ar,fixed,dspark", "--gamma", "3,5",
    "--budget", "8", "--rate", "40",
    "--tier", "interactive:tps_p50=80,ttft_p99_s=2",
    "--tier", "standard:tps_p50=40,ttft_p99_s=5",
    "--tier", "batch:ttft_p99_s=30",
    "--requests", "2000", "--seeds", "3", "--yes", "--no-progress",
)  # fmt: skip


def one(jobs: int) -> dict:
    """One plan in a fresh folder, timed."""
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        out = Path(tmp) / "plan"
        load = os.getloadavg()[0]
        start = time.perf_counter()
        command = [sys.executable, "-m", "dsim", "plan", "--out", str(out), "--jobs", str(jobs)]
        subprocess.run([*command, *ARGS], cwd=HERE, check=True)
        wall = time.perf_counter() - start
        table = pd.read_csv(out / "plan.csv")
        points = len(pd.read_csv(out / "points.csv"))
        best = table.groupby("tier", sort=False).head(1)[["tier", "config", "gpus_for_target"]]
    return {"wall_s": wall, "points": points, "configs": table["config"].nunique(),
            "load_before": load, "load_after": os.getloadavg()[0], "best": best}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    walls = []
    for k in range(args.runs):
        r = one(args.jobs)
        walls.append(r["wall_s"])
        print(f"run {k + 1}: {r['wall_s']:.1f} s wall, {r['configs']} configurations, "
              f"{r['points']} points, load {r['load_before']:.2f} before, "
              f"{r['load_after']:.2f} after")  # fmt: skip
        print(r["best"].to_string(index=False))
    verdict = "met" if max(walls) < LIMIT_S else "missed"
    print(f"wall {min(walls):.1f}-{max(walls):.1f} s over {len(walls)} run(s): {verdict} "
          f"(target < {LIMIT_S:.0f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
