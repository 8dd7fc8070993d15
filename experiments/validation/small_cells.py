"""The small-batch cells a study's runs live in, the runs' own steps beside the profile's.

For every decode-only (R, B) cell with at least 30 real steps (all loads and policies of one
study pooled): the median real step over the speed trace at its start, as a ratio to the
(1, 2) cell's (so the machine's level and the engine's overhead per step mostly cancel: what
is left is the cell's shape), beside the profile's own latency ratio at context 128, and the
cell's model error (sum of predicted over sum of real steps, minus 1). A profile whose cells
wander from study to study while the runs' ratios hold still prices its runs by its own
noise. The runs' steps.csv are in the git history once a study is trimmed, e.g.
`git archive fb7b9e9 experiments/validation/v34/runs | tar -x -C /tmp/rb` (v34, v35;
7e5f299 for v36, v37). small_cells.txt: v34-v37, the first folder holding profile.csv, the
second runs/ (one folder if it holds both):
Usage: python experiments/validation/small_cells.py STUDY [/tmp/rb/experiments/validation/V]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

CELLS = ((1, 2), (1, 3), (1, 4), (1, 5), (2, 4), (2, 6), (2, 10))
MIN_STEPS = 30


def main(study: Path, runs: Path) -> None:
    profile = pd.read_csv(study / "profile.csv")
    verify = profile[(profile["phase"] == "verify") & (profile["context_len"] == 128)]
    price = verify.set_index(["num_seqs", "batch_tokens"])["latency_ms"]
    steps = pd.concat(pd.read_csv(path) for path in sorted(runs.glob("runs/*/s*/*-real/steps.csv")))
    steps = steps[steps["prefill_tokens"] == 0]
    steps = steps.assign(level=steps["real_s"] / steps["speed"])
    cells = steps.groupby(["num_running", "batch_tokens"]).agg(
        steps=("level", "size"),
        level=("level", "median"),
        real_s=("real_s", "sum"),
        predicted_s=("predicted_s", "sum"),
    )
    share = steps.groupby("num_running")["real_s"].sum() / steps["real_s"].sum()
    print(f"# {study.name}: decode time by R: " + ", ".join(
        f"{r} {s:.3f}" for r, s in share.items()))  # fmt: skip
    print("R B steps runs_ratio profile_ratio model_error")
    base_run, base_profile = cells.loc[(1, 2), "level"], price.loc[(1, 2)]
    for cell in CELLS:
        if cell in cells.index and cells.loc[cell, "steps"] >= MIN_STEPS:
            c = cells.loc[cell]
            error = c["predicted_s"] / c["real_s"] - 1
            print(*cell, int(c["steps"]), f"{c['level'] / base_run:.3f}",
                  f"{price.loc[cell] / base_profile:.3f}", f"{error:+.3f}")  # fmt: skip


if __name__ == "__main__":
    study = Path(sys.argv[1])
    main(study, Path(sys.argv[2]) if len(sys.argv) > 2 else study)
