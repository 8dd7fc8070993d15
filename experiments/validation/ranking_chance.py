"""How often the identical-ranking target can be met by chance alone (a read-back of the studies,
judging nothing).

The target asks the trace-driven simulation to rank mtp1, fixed:4 and dspark by TPOT p50 (mean
over the three seeds) exactly as the real runs do, at each load. A simulation that is right on
average still errs per seed: the real runs pay their own acceptance (the served prompts' draws)
and their own queueing, which no simulation shares. This reads that noise from each study's own
seeds: per seed, the error of the simulated ratio policy / mtp1 against the real one (log),
whose spread over the three seeds, over sqrt(3), is the noise on the study's mean. An unbiased
simulation with that noise (pooled over the studies given, the two ratios' errors correlated as
the studies' are) is then drawn against each study's real gaps (Monte Carlo, a fixed seed;
`dsim.validation.ranking_chance.chance`, which every study's report also reads on its own seeds
alone): the chance it ranks the three as the real runs did. Printed per study and load, with the
observed outcome; per load the mean chance and the observed count; per study the chance of both
loads (independent runs), whose mean is the chance one study meets both ranking targets with
nothing wrong in the model. Also the errors' bias and spread over the studies beside the noise:
a spread no larger than the noise says the studies' misses are the noise's. Last, how much of
the noise the runs' own acceptance explains: per seed, about its study's mean, the ratio's TPOT
error against its accepted-length error.

Usage, from a folder holding the studies' `validation.json` (REPO: this repository's root)
(extract them from the git history, e.g. `git show
4cb2cca:experiments/validation/v40/validation.json`); the committed `ranking_chance.txt` holds
four calls: the Xeon's studies, the EPYC's before v48 and v49 were run, those two alone (as
pre-registered), and the EPYC's with them:
PYTHONPATH=REPO python experiments/validation/ranking_chance.py v26 v27 v28 v29 v31 v32 v33
PYTHONPATH=REPO python experiments/validation/ranking_chance.py v34 v35 ... v47
PYTHONPATH=REPO python experiments/validation/ranking_chance.py v48 v49
PYTHONPATH=REPO python experiments/validation/ranking_chance.py v34 v35 ... v49
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from dsim.validation.ranking_chance import chance, seed_errors

POLICIES = ("mtp1", "fixed:4", "dspark")
LOADS = ("light", "moderate")


def seed_runs(record: dict, load: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The real runs' and the trace-driven simulations' `metric`, (policies, seeds) in the
    order of POLICIES (mtp1 first, as `seed_errors` takes them)."""
    cells = [record[policy]["trace"][metric]["loads"][load] for policy in POLICIES]
    return tuple(np.array([cell[side] for cell in cells]) for side in ("real_runs", "sim_runs"))


def read_cell(study: Path, load: str) -> dict:
    """One study and load: the real gaps (log ratio of the seeds' means over mtp1's), the
    simulation's error on them, the per-seed noise on that error, and the observed ranking."""
    record = json.loads((study / "validation.json").read_text())
    real, sim = seed_runs(record, load, "tpot_p50_s")
    real_mean, sim_mean = real.mean(axis=1), sim.mean(axis=1)
    gap = np.log(real_mean[1:] / real_mean[0])
    error = np.log(sim_mean[1:] / sim_mean[0]) - gap
    per_seed = seed_errors(real, sim)
    accepted = seed_errors(*seed_runs(record, load, "accepted_length_mean"))
    same = (np.argsort(real_mean) == np.argsort(sim_mean)).all()
    return {
        "study": study.name,
        "load": load,
        "gap": gap,
        "error": error,
        "noise": per_seed.std(axis=1, ddof=1) / np.sqrt(per_seed.shape[1]),
        "same": bool(same),
        "seed_tpot": (per_seed - per_seed.mean(axis=1, keepdims=True)).ravel(),
        "seed_accepted": (accepted - accepted.mean(axis=1, keepdims=True)).ravel(),
    }


def main(studies: list[Path]) -> None:
    cells = [read_cell(s, load) for s in studies for load in LOADS]
    noise = np.sqrt(np.mean([c["noise"] ** 2 for c in cells], axis=0))
    rho = np.corrcoef([c["error"] for c in cells], rowvar=False)[0, 1]
    covariance = rho * noise[0] * noise[1]
    cov = np.array([[noise[0] ** 2, covariance], [covariance, noise[1] ** 2]])
    rng = np.random.default_rng(0)
    print(f"studies: {' '.join(s.name for s in studies)}")
    print(
        f"pooled noise on a study's mean error: fixed:4/mtp1 {100 * noise[0]:.1f}%, "
        f"dspark/mtp1 {100 * noise[1]:.1f}%; correlation of the two errors {rho:.2f}"
    )
    print("study load      gap f4  gap ds | err f4  err ds | chance ranked  observed")
    for c in cells:
        c["chance"] = chance(c["gap"], cov, rng)
        g, e = 100 * c["gap"], 100 * c["error"]
        print(
            f"{c['study']:5s} {c['load']:8s} {g[0]:+6.1f}% {g[1]:+6.1f}% | {e[0]:+5.1f}% "
            f"{e[1]:+5.1f}% | {c['chance']:.2f}          {'met' if c['same'] else 'missed'}"
        )
    for load in LOADS:
        mine = [c for c in cells if c["load"] == load]
        errors = np.array([c["error"] for c in mine])
        print(
            f"{load}: mean chance {np.mean([c['chance'] for c in mine]):.2f}, observed "
            f"{sum(c['same'] for c in mine)}/{len(mine)}; error bias fixed:4 "
            f"{100 * errors[:, 0].mean():+.1f}%, dspark {100 * errors[:, 1].mean():+.1f}%; "
            f"spread over studies {100 * errors[:, 0].std(ddof=1):.1f}%, "
            f"{100 * errors[:, 1].std(ddof=1):.1f}%"
        )
    tpot = np.concatenate([c["seed_tpot"] for c in cells])
    accepted = np.concatenate([c["seed_accepted"] for c in cells])
    r = np.corrcoef(accepted, tpot)[0, 1]
    print(
        f"per seed, about its study's mean: the ratio's TPOT error against its accepted-length "
        f"error, slope {np.polyfit(accepted, tpot, 1)[0]:.2f}, r {r:.2f}: the runs' own "
        f"acceptance explains {r * r:.0%} of the noise"
    )
    both = [np.prod([c["chance"] for c in cells if c["study"] == s.name]) for s in studies]
    met = sum(all(c["same"] for c in cells if c["study"] == s.name) for s in studies)
    print(
        f"both loads ranked, per study: mean chance {np.mean(both):.2f} "
        f"(range {min(both):.2f}-{max(both):.2f}), observed {met}/{len(studies)}"
    )


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]])
