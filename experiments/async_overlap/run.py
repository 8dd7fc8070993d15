"""dspark vs dspark-async with the synchronous scheduler's per-round cost at 0, default, 3x.

Run from the repo root (about 15-25 minutes on the 2-core VM):
    .venv/bin/python experiments/async_overlap/run.py
Writes results.csv (one row per run) and results.md (paired differences, the rule in README.md).
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.fileio import write_with
from dsim.run import RunSpec, simulate

DIR = Path(__file__).resolve().parent
BASE = RunSpec(window="0:300", profile="profiles/h200-qwen3-8b-vllm2023-roofline.csv")
SEEDS = (0, 1, 2)
LOADS = (1.0, 4.0, 8.0)  # --rate-scale
ARMS = (("dspark", "0"), ("dspark", "auto"), ("dspark", "auto:3"), ("dspark-async", "auto"))
METRICS = ("tps_p50", "throughput_tok_s")


def one(arm: tuple[str, str, float, int]) -> dict:
    policy, cost, load, seed = arm
    spec = replace(BASE, policy=policy, sched_cost=cost, rate_scale=load, seed=seed)
    summary = simulate(spec).summary
    return {"policy": policy, "sched_cost": cost, "rate_scale": load, "seed": seed} | {
        k: summary[k] for k in (*METRICS, "mean_batch_size", "mean_verify_budget", "steps")
    }


def paired(df: pd.DataFrame) -> pd.DataFrame:
    """For each load, cost and metric: dspark minus dspark-async per seed, relative to async."""
    rows = []
    key = ["rate_scale", "seed"]
    asyn = df[df.policy == "dspark-async"].set_index(key)
    for (load, cost), group in df[df.policy == "dspark"].groupby(["rate_scale", "sched_cost"]):
        sync = group.set_index(key)
        for metric in METRICS:
            d = (sync[metric] / asyn.loc[sync.index, metric] - 1.0).to_numpy() * 100
            se = d.std(ddof=1) / np.sqrt(len(d))
            spread = asyn.loc[sync.index, metric]
            same_sign = (d > 0).all() or (d < 0).all()
            rows.append(
                {
                    "rate_scale": load,
                    "sched_cost": cost,
                    "metric": metric,
                    "async_mean": spread.mean(),
                    "async_seed_spread_pct": (spread.max() - spread.min()) / spread.mean() * 100,
                    "diff_pct": d.tolist(),
                    "mean_diff_pct": d.mean(),
                    "se_pct": se,
                    "called": bool(same_sign and abs(d.mean()) > 2 * se),
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    if sys.argv[1:] == ["--summarise"]:  # tables from an existing results.csv
        df = pd.read_csv(DIR / "results.csv", dtype={"sched_cost": str})
    else:
        arms = [(p, c, load, s) for load in LOADS for s in SEEDS for p, c in ARMS]
        with ProcessPoolExecutor(2) as pool:
            df = pd.DataFrame(list(pool.map(one, arms)))
        write_with(DIR / "results.csv", lambda p: df.to_csv(p, index=False, float_format="%.6g"))
    table = paired(df)
    write_with(DIR / "results.md", lambda p: p.write_text(markdown(table)))
    print(table.to_string(index=False))


def markdown(table: pd.DataFrame) -> str:
    cols = "load | cost | metric | async mean | async seed spread | dspark / async - 1 per seed"
    lines = [f"| {cols} | mean | 2 SE | called |", "|" + " --- |" * 9]
    for t in table.itertuples():
        per_seed = ", ".join(f"{d:+.2f}%" for d in t.diff_pct)
        lines.append(
            f"| {t.rate_scale:g}x | {t.sched_cost} | {t.metric} | {t.async_mean:.1f} | "
            f"{t.async_seed_spread_pct:.2f}% | {per_seed} | {t.mean_diff_pct:+.2f}% | "
            f"{2 * t.se_pct:.2f}% | {'yes' if t.called else 'no'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
