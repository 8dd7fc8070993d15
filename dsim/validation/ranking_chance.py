"""The chance that a simulation with no bias ranks the policies as the real runs did. A study
reports this beside the identical-ranking target and never judges by it.

A simulation that is right on average still errs on each seed, because the real runs pay
their own acceptance and queueing and no simulation shares them. Where the policies' real gaps
are no larger than that noise, a ranking miss says nothing about the model. So the report
states the chance alongside the target.

The noise is read from the study's own seeds. Per seed, the simulated TPOT p50 ratio of each
policy over a reference policy errs against the real ratio (log). The covariance of those
errors, taken about each load's mean and pooled over the loads, divided by the number of
seeds, is the noise on a load's mean. An unbiased simulation with that noise is drawn against
the load's real gaps (Monte Carlo, a fixed seed, so the same runs always give the same chance).
"""

from __future__ import annotations

import numpy as np

DRAWS = 20_000


def chance(gap: np.ndarray, cov: np.ndarray, rng: np.random.Generator) -> float:
    """Return the chance that an unbiased simulation orders the policies as the real runs did.

    `gap` is each policy's real log ratio over the reference policy (the reference's own gap is
    0). `cov` is the covariance of the simulation's error on those ratios."""
    drawn = gap + rng.multivariate_normal(np.zeros(len(gap)), cov, DRAWS)
    order = np.argsort(np.concatenate([[0.0], gap]))
    sims = np.column_stack([np.zeros(DRAWS), drawn])
    return float((np.argsort(sims, axis=1) == order).all(axis=1).mean())


def seed_errors(real: np.ndarray, sim: np.ndarray) -> np.ndarray:
    """Return each seed's simulated log ratio over the reference policy minus the real one.

    `real` and `sim` are (policies, seeds) TPOT p50 arrays with the reference policy first.
    The result is (policies - 1, seeds)."""
    return np.log(sim[1:] / sim[0]) - np.log(real[1:] / real[0])


def load_chances(tpot: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, float | None]:
    """Return the chance for each load of `tpot` (load: (real, sim), as `seed_errors` takes
    them, the same policies at every load).

    Every load gets None when the study has no spread to read: a single policy, fewer than
    two seeds at every load, or a run without a TPOT."""
    errors = [seed_errors(real, sim) for real, sim in tpot.values()]
    centred = [e - e.mean(axis=1, keepdims=True) for e in errors if e.shape[1] > 1]
    dof = sum(e.shape[1] - 1 for e in centred)
    if not dof or not len(errors[0]):
        return dict.fromkeys(tpot)
    stacked = np.concatenate(centred, axis=1)
    if not np.isfinite(stacked).all():
        return dict.fromkeys(tpot)
    per_seed = stacked @ stacked.T / dof
    rng = np.random.default_rng(0)
    out: dict[str, float | None] = {}
    for load, (real, _) in tpot.items():
        means = real.mean(axis=1)
        out[load] = chance(np.log(means[1:] / means[0]), per_seed / real.shape[1], rng)
    return out
