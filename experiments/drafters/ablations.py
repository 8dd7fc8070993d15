"""How much each change of the second drafter recipe bought (issue 16): markov with one change
reverted (run_v2c.sh, 2,000 steps each) against the new recipe at the same budget
(ablations/markov-new-2000.parquet), and the 4,000-step markov (shipped until commit
STEPS4000, read from git) for the steps the other way. Held-out prompts, temperature 1, gamma 7.

tau = 1 + mean accepted prefix; first-position acceptance = share of rounds accepting at least
one draft token; differences are paired (the same prompts) with a 90% bootstrap interval over
sequences (analyze.tau_difference).
Usage: python experiments/drafters/ablations.py   (writes ablations.md and ablations.json)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from analyze import difference_cell, tau_difference, trace_at, write_report

from dsim.acceptance.trace import read_acceptance_trace

HERE = Path(__file__).resolve().parent
ABL = HERE / "ablations"
BASELINE = "new-2000"
STEPS4000 = "7477b1b"  # the last commit shipping the 4,000-step markov trace
ROWS = (  # (trace name, what differs from the baseline)
    ("loss", "old loss: 0.9 TV + 0.1 hard-label CE, no KL"),
    ("encoder", "old features and width: final state only, encoder block of width 256"),
    ("context", "no attention over the 16 recent target states"),
    ("data", "old data size: 172 prompts x 1 answer"),
    ("steps800", "800 steps (the first recipe's count)"),
)


def summary(df: pd.DataFrame) -> dict[str, float]:
    return {
        "tau": float(1 + df["accepted"].mean()),
        "first_position": float((df["accepted"] >= 1).mean()),
        "rounds": int(len(df)),
    }


def main() -> None:
    base = read_acceptance_trace(ABL / f"markov-{BASELINE}.parquet")[0]
    out = {BASELINE: {"change": "none: the second recipe at 2,000 steps", **summary(base)}}
    shipped = trace_at(STEPS4000, "markov")
    runs = [(name, what, ABL / f"markov-{name}.parquet") for name, what in ROWS]
    for name, what, path in runs:
        if not path.exists():
            print(f"{path.name}: not collected yet, skipped")
            continue
        df = read_acceptance_trace(path)[0]
        out[name] = {"change": what, **summary(df), "vs_new": tau_difference(df, base)}
    out["steps4000"] = {
        "change": "4,000 steps (run_v2b.sh; shipped until d608f29)",
        **summary(shipped),
        "vs_new": tau_difference(shipped, base),
    }
    lines = [
        "| run | what differs from the new recipe at 2,000 steps | tau | first-position "
        "acceptance | tau - new [90% interval] |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in out.items():
        d = row.get("vs_new")
        diff = difference_cell(d) if d else "-"
        lines.append(
            f"| {name} | {row['change']} | {row['tau']:.3f} | {row['first_position']:.3f} | "
            f"{diff} |"
        )
    text = "\n".join(lines) + "\n"
    write_report("ablations", text, out)


if __name__ == "__main__":
    main()
