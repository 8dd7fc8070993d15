"""The one-sequence cells' step times, real against the step model, as ratios between cells (a
read-back of the studies' real runs, judging nothing).

A ratio between two cells cancels what a run's pricing shares across its steps (the pass factor,
the run's speed trace), so it shows how the profile shapes the cells against how the runs paid
them. Per study and load, over its three seeds: dspark's mean decode step W at (1, 2) over its
(1, 1), both from one run; fixed:4's at (1, 5) over mtp1's at (1, 2), two runs of one triple,
each step divided by its run's speed trace. Then the step model's error per cell (predicted /
real - 1) by the step's context, pooled over the studies: a profile interpolating wrongly
between its contexts (128, 512, ...) would err more away from them.
Usage, from a folder holding the studies' runs (extract them from the git history, e.g.
`git archive f026812 experiments/validation/v42 | tar -x -C /tmp/rb`):
python experiments/validation/cell_ratios.py v40 v41 v42 v43
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

CELLS = (("dspark", 1), ("dspark", 2), ("fixed4", 5), ("mtp1", 2))
BINS = [0, 128, 192, 256, 384, 512, 4096]


def one_seq_steps(seed: Path, policy: str, tokens: int) -> pd.DataFrame:
    """A real run's decode steps of one sequence and `tokens` tokens."""
    steps = pd.read_csv(seed / f"{policy}-real" / "steps.csv")
    keep = (steps.prefill_tokens == 0) & (steps.num_running == 1) & (steps.batch_tokens == tokens)
    return steps[keep]


def ratio(a: pd.DataFrame, b: pd.DataFrame, column: str) -> float:
    return float((a[column] / a.speed).mean() / (b[column] / b.speed).mean())


def main(studies: list[str]) -> None:
    print("study load     dspark (1,2)/(1,1) real model   fixed:4 (1,5)/mtp1 (1,2) real model")
    errors = []
    for study in studies:
        for load in ("light", "moderate"):
            seeds = sorted(Path(f"experiments/validation/{study}/runs/{load}").glob("s*"))
            out = {"d_real": [], "d_model": [], "f_real": [], "f_model": []}
            for seed in seeds:
                cells = {(p, q): one_seq_steps(seed, p, q) for p, q in CELLS}
                one, two = cells["dspark", 1], cells["dspark", 2]
                five, mtp = cells["fixed4", 5], cells["mtp1", 2]
                out["d_real"].append(ratio(two, one, "real_s"))
                out["d_model"].append(ratio(two, one, "predicted_s"))
                out["f_real"].append(ratio(five, mtp, "real_s"))
                out["f_model"].append(ratio(five, mtp, "predicted_s"))
                for (policy, q), steps in cells.items():
                    errors.append(
                        steps.assign(cell=f"{policy} (1, {q})", bin=pd.cut(steps.context_len, BINS))
                    )
            m = {k: np.mean(v) for k, v in out.items()}
            print(
                f"{study} {load:9s}            {m['d_real']:.4f} {m['d_model']:.4f}"
                f"                          {m['f_real']:.4f} {m['f_model']:.4f}"
            )
    steps = pd.concat(errors)
    table = steps.groupby(["cell", "bin"], observed=True).agg(
        steps=("real_s", "size"), real=("real_s", "sum"), predicted=("predicted_s", "sum")
    )
    table["error"] = (table.predicted / table.real - 1).round(4)
    print("\nthe step model's error per cell by context (pooled over the studies and loads)")
    print(table[["steps", "error"]].to_string())


if __name__ == "__main__":
    main(sys.argv[1:])
