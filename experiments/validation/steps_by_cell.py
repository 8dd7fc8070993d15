"""Where the step model errs, by the shapes each policy chose (v14 on; validate writes every
real run's priced steps to runs/LOAD/sSEED/POLICY-real/steps.csv).

Decode-only steps of every real run, split by whether the profile measured their (B, R) as a
verify row ("measured") or the model interpolated it ("interpolated"); per policy and load:
the share of real step time in each group, and each group's model error relative to its own
run's (predicted / real - 1 of the group minus that of the whole run, so a run-wide machine
speed cancels), time-weighted over the runs. The hypothesis of v13 (a scheduler that
optimises against the model picks the shapes the model under-prices) predicts dspark's
interpolated steps below its measured ones, and dspark spending more of its time there.
Usage: python experiments/validation/steps_by_cell.py experiments/validation/v28
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def main(out: Path) -> None:
    profile = pd.read_csv(out / "profile.csv")
    verify = profile[profile["phase"] == "verify"]
    measured = set(zip(verify["batch_tokens"], verify["num_seqs"], strict=True))
    rows = []
    for path in sorted(out.glob("runs/*/s*/*-real/steps.csv")):
        steps = pd.read_csv(path)
        steps = steps[steps["prefill_tokens"] == 0]
        run_error = steps["predicted_s"].sum() / steps["real_s"].sum() - 1
        cell = zip(steps["batch_tokens"], steps["num_running"], strict=True)
        steps = steps.assign(group=["measured" if c in measured else "interpolated" for c in cell])
        for group, part in steps.groupby("group"):
            rows.append(
                {
                    "load": path.parts[-4],
                    "policy": path.parent.name.removesuffix("-real"),
                    "group": group,
                    "real_s": part["real_s"].sum(),
                    "relative_error": part["predicted_s"].sum() / part["real_s"].sum()
                    - 1
                    - run_error,
                }
            )
    df = pd.DataFrame(rows)
    df["weighted"] = df["relative_error"] * df["real_s"]
    table = df.groupby(["load", "policy", "group"]).agg(
        real_s=("real_s", "sum"), weighted=("weighted", "sum")
    )
    # the groups split each run's decode steps: their sum is the policy's decode time
    share = table["real_s"] / table.groupby(level=["load", "policy"])["real_s"].transform("sum")
    result = pd.DataFrame(
        {
            "time_share": share.round(3),
            "error_vs_run": (table["weighted"] / table["real_s"]).round(4),
        }
    )
    print(result.to_string())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
