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

import pandas as pd

from dsim.validation.figures import comparison, comparisons
from dsim.validation.runs import KeptRun, run_name, simulate_draws

DRAWS = 32
POLICIES = ("mtp1", "fixed:4", "dspark")
METRICS = ("tpot_p50_s", "ttft_p50_s", "accepted_length_mean")
KINDS = ("real", "trace")


def runs_of(study: str) -> pd.DataFrame:
    """One row per kept run and kind: the real run ("real", draw -1) and each draw of its
    trace-driven simulation ("trace", draw 0, 1, ...), with the compared metrics."""
    base = Path("experiments/validation") / study
    rows = []
    for r in json.loads((base / "diagnostics.json").read_text())["runs"]:
        folder, name = base / r["folder"], run_name(r["policy"])
        tags = {"load": r["load"], "seed": r["seed"], "policy": r["policy"]}
        summary = json.loads((folder / f"{name}-trace" / "summary.json").read_text())
        real = json.loads((folder / f"{name}-real" / "summary.json").read_text())
        file = folder / f"{name}-trace-draws.csv"  # a study that drew them itself
        if file.exists():
            draws = pd.read_csv(file)
        else:
            kept = KeptRun.read(folder, r["policy"])
            _, draws = simulate_draws(kept.spec, kept.work, kept.speed, DRAWS)
        if draws["tpot_p50_s"].iloc[0] != summary["tpot_p50_s"]:
            raise SystemExit(f"{folder}: draw 0 does not reproduce the study's simulation")
        rows.append({**tags, "kind": "real", "draw": -1, **{m: real[m] for m in METRICS}})
        rows += [{**tags, "kind": "trace", "draw": d["draw"], **{m: d[m] for m in METRICS}}
                 for d in draws.to_dict("records")]  # fmt: skip
    return pd.DataFrame(rows)


def accepted_error(frame: pd.DataFrame, policy: str) -> float:
    """The simulated accepted length's error of the mean over the repeats, as the report's."""
    rows = frame[frame["policy"] == policy].sort_values("seed")
    real, sim = (rows[rows["kind"] == k]["accepted_length_mean"].to_numpy() for k in KINDS)
    return comparison(real, sim)["error"]


def targets(runs: pd.DataFrame, draws: pd.Series) -> dict[str, str]:
    """Per load, the report's figures (`dsim.validation.figures.comparisons`) with each run's
    simulation the mean over the `draws` rows selected: TPOT p50 errors, accepted-length
    errors, ratio errors and the rankings."""
    chosen = runs[(runs["kind"] == "real") | draws]
    keys = ["load", "seed", "policy", "kind"]
    frame = chosen.groupby(keys, sort=False, as_index=False)[list(METRICS)].mean()
    out = {}
    for load, c in comparisons(frame).items():
        here = frame[frame["load"] == load]
        tpot, ratio = c["tpot_errors"], c["ratio_errors"]
        real, sim = c["real"]["ranking"], c["sim"]["ranking"]
        out[load] = (
            "TPOT p50 error " + " ".join(f"{p} {100 * tpot[p]:+.1f}%" for p in POLICIES)
            + " | accepted "
            + " ".join(f"{100 * accepted_error(here, p):+.1f}%" for p in POLICIES)
            + " | ratio " + " ".join(f"{p} {100 * ratio[p]:+.1f}%" for p in POLICIES[1:])
            + f" | ranking {'met' if c['targets']['identical_ranking'] else 'MISSED'} "
            f"(real {' < '.join(real)}, sim {' < '.join(sim)})"
        )  # fmt: skip
    return out


def main(studies: list[str]) -> None:
    for study in studies:
        runs = runs_of(study)
        sims = runs[runs["kind"] == "trace"]
        per_run = sims.groupby(["load", "policy", "seed"])[["accepted_length_mean", "tpot_p50_s"]]
        spread = (100 * per_run.std() / per_run.mean()).groupby(["load", "policy"]).mean()
        spread.columns = ["tau_sd_pct", "tpot_sd_pct"]
        draws = sims["draw"].nunique()
        print(f"## {study}: sd over {draws} draws of one run, % of its mean (mean over seeds)")
        print(spread.round(1).to_string())
        for label, chosen in (("draw 0 (the study's)", runs["draw"] == 0),
                              (f"mean of {draws} draws", runs["draw"] >= 0)):  # fmt: skip
            print(f"{study}, {label}:")
            for load, line in targets(runs, chosen).items():
                print(f"  {load}: {line}")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
