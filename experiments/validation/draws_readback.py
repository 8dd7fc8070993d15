"""A study's trace-driven simulations again, over many acceptance draws (a read-back).

Each kept real run of a study is simulated again on its own workload, profiles and speed trace
(`dsim.validation.runs.simulate_draws`), under DRAWS acceptance draws: draw 0 is the run's own
seed, the one simulation the study made (checked: it must reproduce the study's TPOT p50 bit
for bit), the others seeds of their own. Printed: per policy and load, the sd over draws of a
run's accepted length and TPOT p50 (the noise one draw carries), then the report's TPOT p50
errors, ratio errors and rankings from draw 0 alone and from the mean over the draws. It
judges nothing. A trimmed study's runs are in the git history, e.g.
`git archive 07629c1 experiments/validation/v38 experiments/validation/v39 | tar -x -C /tmp/rb`
(draws_readback.txt: v38 and v39). A study that drew its simulations itself (`--draws`,
since v40) is read from its `*-trace-draws.csv` instead, as it ran. Usage, from the folder the
runs were extracted into (or the repository, for a study whose runs are still in the tree):
python experiments/validation/draws_readback.py STUDY [STUDY ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.run_spec import RunSpec
from dsim.validation.reference import SpeedTrace
from dsim.validation.runs import simulate_draws
from dsim.workload import Workload

DRAWS = 32
POLICIES = ("mtp1", "fixed:4", "dspark")


def runs_of(study: str) -> pd.DataFrame:
    """One row per kept run and draw: the simulated and the real TPOT p50 and accepted length."""
    base = Path("experiments/validation") / study
    kept = json.loads((base / "diagnostics.json").read_text())["runs"]
    rows = []
    for r in kept:
        folder, name = base / r["folder"], r["policy"].replace(":", "")
        summary = json.loads((folder / f"{name}-trace" / "summary.json").read_text())
        real = json.loads((folder / f"{name}-real" / "summary.json").read_text())
        req = pd.read_parquet(folder / f"{name}-real" / "requests.parquet")
        work = Workload(
            req["arrival_s"].to_numpy(np.float64),
            req["prompt_tokens"].to_numpy(np.int64),
            req["output_tokens"].to_numpy(np.int64),
            "real run",
        )
        ref = pd.read_csv(folder / f"{name}-reference.csv")
        speed = SpeedTrace(ref["at_s"].to_numpy(), ref["speed"].to_numpy())
        file = folder / f"{name}-trace-draws.csv"  # a study that drew them itself
        if file.exists():
            draws = pd.read_csv(file)
        else:
            _, draws = simulate_draws(RunSpec(**summary["spec"]), work, speed, DRAWS)
        if draws["tpot_p50_s"].iloc[0] != summary["tpot_p50_s"]:
            raise SystemExit(f"{folder}: draw 0 does not reproduce the study's simulation")
        rows += [
            {
                "load": r["load"],
                "seed": r["seed"],
                "policy": r["policy"],
                "draw": d.draw,
                "tpot": d.tpot_p50_s,
                "tau": d.accepted_length_mean,
                "tpot_real": real["tpot_p50_s"],
                "tau_real": real["accepted_length_mean"],
            }
            for d in draws.itertuples()
        ]
    return pd.DataFrame(rows)


def targets(runs: pd.DataFrame, load: str) -> str:
    """TPOT p50 errors, ratio errors and the ranking of one load, as the report figures them
    (means over the repeats)."""
    per_run = runs[runs["load"] == load].groupby(["policy", "seed"]).mean(numeric_only=True)
    m = per_run.groupby("policy").mean()
    error = m["tpot"] / m["tpot_real"] - 1
    tau = m["tau"] / m["tau_real"] - 1
    ratio = {p: m.tpot[p] / m.tpot["mtp1"] / (m.tpot_real[p] / m.tpot_real["mtp1"]) - 1
             for p in POLICIES[1:]}  # fmt: skip
    real, sim = list(m["tpot_real"].sort_values().index), list(m["tpot"].sort_values().index)
    return (
        "TPOT p50 error " + " ".join(f"{p} {100 * error[p]:+.1f}%" for p in POLICIES)
        + " | accepted " + " ".join(f"{100 * tau[p]:+.1f}%" for p in POLICIES)
        + " | ratio " + " ".join(f"{p} {100 * v:+.1f}%" for p, v in ratio.items())
        + f" | ranking {'met' if real == sim else 'MISSED'} (real {' < '.join(real)}, "
        f"sim {' < '.join(sim)})"
    )  # fmt: skip


def main(studies: list[str]) -> None:
    for study in studies:
        runs = runs_of(study)
        spread = runs.groupby(["load", "policy", "seed"]).agg(
            tau=("tau", "std"), tau_mean=("tau", "mean"), tpot=("tpot", "std"),
            tpot_mean=("tpot", "mean"),
        )  # fmt: skip
        sd = (
            pd.DataFrame(
                {
                    "tau_sd_pct": 100 * spread["tau"] / spread["tau_mean"],
                    "tpot_sd_pct": 100 * spread["tpot"] / spread["tpot_mean"],
                }
            )
            .groupby(["load", "policy"])
            .mean()
        )
        draws = runs["draw"].nunique()
        print(f"## {study}: sd over {draws} draws of one run, % of its mean (mean over seeds)")
        print(sd.round(1).to_string())
        for label, rows in (("draw 0 (the study's)", runs[runs["draw"] == 0]),
                            (f"mean of {draws} draws", runs)):  # fmt: skip
            print(f"{study}, {label}:")
            for load in ("light", "moderate"):
                print(f"  {load}: {targets(rows, load)}")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
