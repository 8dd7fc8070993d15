"""Read v34's and v35's projections back under the loads' weights (`dsim.validation.timeline`).

    .venv/bin/python experiments/validation/projection_readback.py

Each run's wall time and each projection's elapsed time come from the report's
`diagnostics.json`; a load's weight is the mean busy seconds of its runs' trace simulations
(every policy, seed), read from commit fb7b9e9 (the runs' folders before they were trimmed),
standing in for the rate rule's expected workloads. Prints, per study and per way of weighing,
the projection's error after runs 1-17 against the study's real total.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
COMMIT = "fb7b9e9"
POLICIES = ("mtp1", "fixed:4", "dspark")
LOADS = ("light", "moderate")


def sim_busy_s(study: str, load: str, seed: int, policy: str) -> float:
    """Busy seconds of one run's trace simulation, from the commit that kept its folder."""
    name = f"experiments/validation/{study}/runs/{load}/s{seed}/{policy.replace(':', '')}-trace"
    summary = json.loads(subprocess.check_output(["git", "show", f"{COMMIT}:{name}/summary.json"]))
    return summary["busy_fraction"] * summary["duration_s"]


def errors(runs: list[tuple[str, float]], history: list[dict], weight: dict[str, float]) -> list:
    """The projection's relative error after each run but the last, weighing loads by `weight`."""
    total = history[-1]["projected_total_s"]
    out = []
    for h in history[1:-1]:
        done, left = runs[: h["runs_done"]], runs[h["runs_done"] :]
        per_weight = sum(s for _, s in done) / sum(weight[load] for load, _ in done)
        projected = h["elapsed_s"] + sum(per_weight * weight[load] for load, _ in left)
        out.append(projected / total - 1)
    return out


def main() -> None:
    for study in ("v34", "v35"):
        d = json.loads((HERE / study / "diagnostics.json").read_text())
        runs = [(r["load"], r["wall_s"]) for r in d["runs"]]
        by = {
            (load, p): statistics.fmean(sim_busy_s(study, load, s, p) for s in range(3))
            for load in LOADS
            for p in POLICIES
        }
        ways = {
            "equal (as run)": dict.fromkeys(LOADS, 1.0),
            "mtp1's busy time": {load: by[(load, "mtp1")] for load in LOADS},
            "all policies' busy time": {
                load: statistics.fmean(by[(load, p)] for p in POLICIES) for load in LOADS
            },
        }
        for name, weight in ways.items():
            e = 100 * np.abs(errors(runs, d["projection"], weight))
            print(f"{study} {name:24s} mean |error| {e.mean():4.1f}%  largest {e.max():4.1f}%")


if __name__ == "__main__":
    main()
