"""The one-sequence cells' step times, real against the step model, as ratios between cells (a
read-back of the studies' real runs, judging nothing).

A ratio between two cells cancels what a run's pricing shares across its steps (the pass factor,
the run's speed trace), so it shows how the profile shapes the cells against how the runs paid
them. Per study and load, over its three seeds, the mean decode step W of: dspark at (1, 2) over
dspark at (1, 1), both from one run; fixed:4 at (1, 5) over mtp1 at (1, 2); mtp1 at (1, 2) over
dspark at (1, 1), the pair that sets the simulated dspark's TPOT against mtp1's (two runs of one
triple each, every step divided by its run's speed trace). Beside them, the share of dspark's
one-sequence decode steps that verify its draft: dspark schedules by the profile, so a profile's
prices move its real runs too. Then the step model's error per cell (predicted / real - 1) by
the step's context, pooled over the studies: a profile interpolating wrongly between its
contexts (128, 512, ...) would err more away from them.

Usage, from a folder holding the studies' runs (extract them from the git history, e.g.
`git archive f026812 experiments/validation/v42 | tar -x -C /tmp/rb`); `cell_ratios.txt` holds
two calls, before and after the verify points were profiled after the drafter's pass:
python experiments/validation/cell_ratios.py v40 v41 v42 v43
python experiments/validation/cell_ratios.py v44 v45 v46 v47
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

CELLS = (("dspark", 1), ("dspark", 2), ("fixed4", 5), ("mtp1", 2))
# (numerator cell, denominator cell) of each ratio printed
PAIRS = (
    (("dspark", 2), ("dspark", 1)),
    (("fixed4", 5), ("mtp1", 2)),
    (("mtp1", 2), ("dspark", 1)),
)
BINS = [0, 128, 192, 256, 384, 512, 4096]


def one_seq_steps(seed: Path, policy: str, tokens: int) -> pd.DataFrame:
    """A real run's decode steps of one sequence and `tokens` tokens."""
    steps = pd.read_csv(seed / f"{policy}-real" / "steps.csv")
    keep = (steps.prefill_tokens == 0) & (steps.num_running == 1) & (steps.batch_tokens == tokens)
    return steps[keep]


def ratio(a: pd.DataFrame, b: pd.DataFrame, column: str) -> float:
    """Mean speed-divided step of a over b's; NaN where a run has no step of either cell."""
    if a.empty or b.empty:
        return float("nan")
    return float((a[column] / a.speed).mean() / (b[column] / b.speed).mean())


def main(studies: list[str]) -> None:
    print(
        "study load      dspark (1,2)/(1,1)      fixed:4 (1,5)/mtp1 (1,2)  mtp1 (1,2)/dspark (1,1)"
        "  dspark\n"
        "                real   model  error     real   model  error       real   model  error"
        "  (1,2) share"
    )
    errors = []
    for study in studies:
        for load in ("light", "moderate"):
            seeds = sorted(Path(f"experiments/validation/{study}/runs/{load}").glob("s*"))
            out = {pair: {"real_s": [], "predicted_s": []} for pair in PAIRS}
            verified = one_seq = 0
            for seed in seeds:
                cells = {(p, q): one_seq_steps(seed, p, q) for p, q in CELLS}
                verified += len(cells["dspark", 2])
                one_seq += len(cells["dspark", 1]) + len(cells["dspark", 2])
                for (a, b), by_column in out.items():
                    for column, values in by_column.items():
                        values.append(ratio(cells[a], cells[b], column))
                for (policy, q), steps in cells.items():
                    errors.append(
                        steps.assign(cell=f"{policy} (1, {q})", bin=pd.cut(steps.context_len, BINS))
                    )
            line = f"{study} {load:9s}"
            for by_column in out.values():
                # a seed without a cell's step (dspark verifying no draft) is left out
                real, model = np.nanmean(by_column["real_s"]), np.nanmean(by_column["predicted_s"])
                line += f"  {real:.4f} {model:.4f} {model / real - 1:+.2%}"
            print(f"{line}  {verified / one_seq:.2f}")
    steps = pd.concat(errors)
    table = steps.groupby(["cell", "bin"], observed=True).agg(
        steps=("real_s", "size"), real=("real_s", "sum"), predicted=("predicted_s", "sum")
    )
    table["error"] = (table.predicted / table.real - 1).round(4)
    print("\nthe step model's error per cell by context (pooled over the studies and loads)")
    print(table[["steps", "error"]].to_string())


if __name__ == "__main__":
    main(sys.argv[1:])
