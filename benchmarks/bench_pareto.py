"""A full sweep's wall time: 6 policies x 12 loads over the Azure conv trace, 2 local processes.

Target: under 10 minutes (issue 4). The sweep is the production experiment's config with its
trace window removed (the whole 58-minute trace, 19,366 requests) and one seed (the config now
lists three; its first is the 72-point sweep of earlier commits), run into a fresh directory so
nothing comes from the cache.

`--compare COMMIT` runs the sweep at COMMIT (a temporary worktree, its own copy of the config)
and at this checkout, A B, each in a fresh process, and prints the ratio B/A of wall time per
simulated step (all points' steps summed: model changes may change their number).
Run: .venv/bin/python benchmarks/bench_pareto.py [--window 0:900] [--jobs 2] [--compare 1e9b53c]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path

from bench_sim import HERE, checkout, load

CONFIG = "experiments/production_mtp1_vs_dspark/production_mtp1_vs_dspark.toml"
LIMIT_S = 600.0


def one(window: str | None, jobs: int) -> dict:
    """The sweep with the dsim on the path (this checkout's or COMMIT's), timed."""
    from dsim.pareto.config import load_config
    from dsim.pareto.sweep import make_points, run_sweep

    cfg = load_config(CONFIG)
    if "seeds" in {f.name for f in fields(cfg)}:
        cfg = replace(cfg, seeds=cfg.seeds[:1])
    cfg = replace(cfg, base=replace(cfg.base, window=window))
    points = make_points(cfg.specs())
    with tempfile.TemporaryDirectory(prefix="bench_pareto.") as out:
        start = time.perf_counter()
        table = run_sweep(points, Path(out), "local", jobs)
        wall = time.perf_counter() - start
    steps = int(table["steps"].sum())
    return {
        "points": len(points),
        "requests": int(table["requests"].iloc[0]),
        "wall_s": round(wall, 1),
        "s_per_point": round(wall / len(points), 2),
        "steps": steps,
        "us_per_step_wall": round(wall / steps * 1e6, 2),
    }


def child(code: Path, window: str | None, jobs: int) -> dict:
    """One sweep in a fresh process with `code`'s dsim and config."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--jobs", str(jobs)]
    cmd += ["--window", window] if window else []
    env = {"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(cmd, cwd=code, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", default=None, help="START:END seconds (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--compare", metavar="COMMIT", help="time against COMMIT, A then B")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(args.window, args.jobs)))
        return
    sides = []
    if args.compare:
        with checkout(args.compare) as base:
            sides.append(("A " + args.compare, child(base, args.window, args.jobs)))
            print(f"{sides[0][0]}: {json.dumps(sides[0][1])} [{load()}]", flush=True)
    sides.append(("B this", child(HERE, args.window, args.jobs)))
    name, r = sides[-1]
    print(f"{name}: {json.dumps(r)} [{load()}]", flush=True)
    verdict = "OK" if r["wall_s"] < LIMIT_S else "OVER"
    print(
        f"{r['points']} points, {r['requests']} requests each, window {args.window or 'all'}, "
        f"{args.jobs} processes: {r['wall_s']:.0f} s, {r['s_per_point']:.1f} s/point "
        f"[{verdict}: target {LIMIT_S:.0f} s]"
    )
    if args.compare:
        ratio = r["us_per_step_wall"] / sides[0][1]["us_per_step_wall"]
        print(f"per-step wall B/A: {ratio:.3f} (target <= 0.5)")


if __name__ == "__main__":
    main()
