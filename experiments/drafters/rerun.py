"""Issue 16: how far does one training run of the same recipe land from another? markov on the
361k-token data trained again (2026-12-01, third session) after the first run's checkpoints
were lost with the machine.

What differs from the first run (run_v2f.sh, 2026-12-01 03:34-05:56 UTC): the data cache was
built again with the same command (`dsim prepare-data --samples 5 --out .cache/dsim/data/s5
--shard K/2`, seed 0); training ran the same stages (2,000, then warm restarts to 4,000 and
8,000) with the same seed, but alone on two torch threads (`KINDS=markov THREADS=2
STAGES="2000 4000 8000" OUT=experiments/drafters/rerun bash run_v2f.sh`) instead of one thread
beside other lanes, and without interruptions. Two threads change the order of floating-point
sums, so the runs are expected to part ways; how far they land apart is what this measures.

Rule, fixed before any result (committed with this script, before the rerun's first stage
ended):
- For 4,000 and 8,000 steps, where the rerun's held-out trace exists: tau and first-position
  acceptance of both runs, and tau(rerun) - tau(first) with the paired 90% bootstrap over
  sequences (analyze.tau_difference). Whether the two traces are identical row for row.
- Reading: this is one pair of runs, so it is one draw of the run-to-run spread, not its size.
  If the difference's interval excludes 0, the rows of data300k.md and steps8000.md (one
  training run each) understate their uncertainty, and their small differences must be read
  with that in mind; if it does not, the pair gives no sign of it.
- The rerun does not replace the committed data300k/ traces, and nothing is promoted: by
  data300k.py's rule the new drafters replace the shipped ones only all three together.
Usage: python experiments/drafters/rerun.py   (writes rerun.md and rerun.json)
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from ablations import summary
from analyze import difference_cell, tau_difference

HERE = Path(__file__).resolve().parent
STAGES = (4000, 8000)


def main() -> None:
    out: dict = {}
    lines = [
        "markov on the 361k-token data: the first run (data300k/) against the rerun (rerun/), "
        "temperature 1, held-out prompts. Rule: rerun.py.",
        "",
        "| steps | tau first -> rerun | rerun - first [90%] | first-position | identical rows |",
        "| --- | --- | --- | --- | --- |",
    ]
    for steps in STAGES:
        path = HERE / "rerun" / f"markov-{steps}.parquet"
        if not path.exists():
            continue
        first = pd.read_parquet(HERE / "data300k" / f"markov-{steps}.parquet")
        again = pd.read_parquet(path)
        same = first.shape == again.shape and bool((first.values == again.values).all())
        a, b = summary(first), summary(again)
        d = tau_difference(again, first)
        out[steps] = {"first": a, "rerun": b, "rerun_minus_first": d, "identical": same}
        lines.append(
            f"| {steps:,} | {a['tau']:.3f} -> {b['tau']:.3f} | {difference_cell(d)} | "
            f"{a['first_position']:.3f} -> {b['first_position']:.3f} | {same} |"
        )
    text = "\n".join(lines) + "\n"
    (HERE / "rerun.md").write_text(text)
    (HERE / "rerun.json").write_text(json.dumps(out, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
