"""A full sweep's wall time: 6 policies x 12 loads over the Azure conv trace, 2 local processes.

Target: under 10 minutes (issue 4). The sweep is the production experiment's config with its
trace window removed (the whole 58-minute trace, 19,366 requests), run into a fresh directory
so nothing comes from the cache.
Run: .venv/bin/python benchmarks/bench_pareto.py [--window 0:900] [--jobs 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from dsim.pareto.config import load_config
from dsim.pareto.sweep import make_points, run_sweep

CONFIG = "experiments/production_mtp1_vs_dspark/production_mtp1_vs_dspark.toml"
LIMIT_S = 600.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", default=None, help="START:END seconds (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    cfg = load_config(CONFIG)
    cfg = replace(cfg, base=replace(cfg.base, window=args.window))
    points = make_points(cfg.specs())
    with tempfile.TemporaryDirectory(prefix="bench_pareto.") as out:
        start = time.perf_counter()
        table = run_sweep(points, Path(out), "local", args.jobs)
        wall = time.perf_counter() - start
    requests = int(table["requests"].iloc[0])
    verdict = "OK" if wall < LIMIT_S else "OVER"
    print(
        f"{len(points)} points ({len(cfg.policies)} policies x {len(cfg.loads)} loads, "
        f"{requests} requests each, window {args.window or 'all'}) with {args.jobs} processes: "
        f"{wall:.0f} s, {wall / len(points):.1f} s/point wall [{verdict}: target {LIMIT_S:.0f} s]"
    )


if __name__ == "__main__":
    main()
