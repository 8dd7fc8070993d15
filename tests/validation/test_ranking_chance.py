"""The chance an unbiased simulation reproduces the real ranking: closed forms, symmetry, the
cases with no spread to read, and its place in the study's comparison."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dsim.validation.figures import METRICS, comparisons
from dsim.validation.ranking_chance import DRAWS, chance, load_chances

# a chance estimated from DRAWS draws: its sd is at most 0.5 / sqrt(DRAWS) = 0.0035
TOL = 4 * 0.5 / np.sqrt(DRAWS)


def two_policy_study(gap: float, spread: float) -> dict:
    """Two loads of three seeds: the reference at 1, the other policy's real TPOT at e^gap and
    its simulated one at e^(gap + d), d = -spread, 0, +spread (so the per-seed error's variance
    about each load's mean, pooled over 4 degrees of freedom, is spread^2)."""
    real = np.array([[1.0] * 3, [np.exp(gap)] * 3])
    sim = np.array([[1.0] * 3, np.exp(gap + np.array([-spread, 0.0, spread]))])
    return {"light": (real, sim), "moderate": (real, sim)}


def test_two_policies_match_the_normal_closed_form():
    gap, spread = 0.03, 0.05
    sigma = spread / np.sqrt(3)  # the noise on a load's mean of three seeds
    got = load_chances(two_policy_study(gap, spread))
    assert set(got) == {"light", "moderate"}
    for value in got.values():
        assert value == pytest.approx(stats.norm.cdf(gap / sigma), abs=TOL)
    slower = load_chances(two_policy_study(-gap, spread))["light"]
    assert slower == pytest.approx(stats.norm.cdf(gap / sigma), abs=TOL)  # the sign is moot


def test_exchangeable_noise_over_a_tie_ranks_by_chance_alone():
    # errors over the reference of three policies with iid noise: covariance [[2, 1], [1, 2]]
    tie = chance(np.array([1e-12, 2e-12]), np.array([[2.0, 1.0], [1.0, 2.0]]), rng())
    assert tie == pytest.approx(1 / 6, abs=TOL)


def test_noise_far_below_the_gaps_always_ranks_right():
    assert chance(np.array([0.1, -0.2]), 1e-12 * np.eye(2), rng()) == 1.0


def test_no_spread_to_read_gives_no_chance():
    one_seed = {"light": (np.array([[1.0], [1.2]]), np.array([[1.0], [1.1]]))}
    assert load_chances(one_seed) == {"light": None}
    one_policy = {"light": (np.ones((1, 3)), np.ones((1, 3)))}
    assert load_chances(one_policy) == {"light": None}
    real, sim = two_policy_study(0.03, 0.05)["light"]
    sim = sim.copy()
    sim[1, 0] = np.nan  # a run without a TPOT
    assert load_chances({"light": (real, sim)}) == {"light": None}


def test_same_runs_same_chance_bit_for_bit():
    study = two_policy_study(0.02, 0.04)
    assert load_chances(study) == load_chances(study)


def test_comparison_reads_it_per_load():
    real = {"mtp1": 1.0, "dspark": 0.8}
    sims = {"mtp1": [1.0, 1.03, 0.98], "dspark": [0.82, 0.79, 0.84]}
    rows = []
    for load in ("light", "moderate"):
        for policy in ("mtp1", "dspark"):
            for seed in range(3):
                for kind, t in (
                    ("real", real[policy] * (1 + 0.01 * seed)),
                    ("trace", sims[policy][seed]),
                ):
                    rows.append(
                        {"load": load, "seed": seed, "policy": policy, "kind": kind}
                        | {m: 2 * t for m in METRICS}
                        | {"tpot_p50_s": t}
                    )
    comp = comparisons(pd.DataFrame(rows))
    seeds = 1 + 0.01 * np.arange(3)
    arrays = (np.array([seeds, 0.8 * seeds]), np.array([sims["mtp1"], sims["dspark"]]))
    want = load_chances({"light": arrays, "moderate": arrays})
    for load in ("light", "moderate"):
        assert comp[load]["real"]["ranking_chance"] == want[load]
        assert 0.5 < want[load] <= 1.0  # a gap of 22% against a few percent of noise
    assert comp["light"]["targets"]["identical_ranking"]  # the chance never judges


def rng() -> np.random.Generator:
    return np.random.default_rng(0)
