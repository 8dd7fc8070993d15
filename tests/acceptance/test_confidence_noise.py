"""Confidence noise: a parameter of discrimination only (acceptance draws unchanged), whose AUC
has a closed form, and which `fit_confidence` recovers from a trace with tv columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import expit, logit
from scipy.stats import norm

from dsim.acceptance.discrimination import discrimination
from dsim.acceptance.evidence import fit_confidence
from dsim.acceptance.measure import served_rounds
from dsim.acceptance.parametric import DomainModel, ParametricAcceptance
from dsim.acceptance.trace import conf_columns, tv_columns

GAMMA = 7
Q = (0.7, 0.65, 0.6, 0.6, 0.55, 0.55, 0.5)


def model(noise: float, **kw) -> ParametricAcceptance:
    return ParametricAcceptance(GAMMA, [DomainModel("d", Q)], np.ones(1), noise=noise, **kw)


def recorded(noise: float, seed: int, requests: int = 100, rounds: int = 40, **kw) -> pd.DataFrame:
    """A trace drawn from the model at `noise`, its tv columns the true probabilities: at
    noise 0 and overconf 1 the confidence is p itself, and the acceptance draws are the same."""
    draws = {}
    for n, extra in ((0.0, {}), (noise, kw)):
        src = model(n, **extra)
        rng = np.random.default_rng(seed)
        src.bind(requests, rng)
        draws[n] = [src.draw(np.arange(requests), rng) for _ in range(rounds)]
    frames = []
    for t in range(rounds):
        (p, acc), (conf, acc_noisy) = draws[0.0][t], draws[noise][t]
        assert np.array_equal(acc, acc_noisy)
        frame = pd.DataFrame({"seq_id": np.arange(requests), "round": t, "domain": "d"})
        frame["gamma"] = GAMMA
        frame[conf_columns(GAMMA)] = conf
        frame[tv_columns(GAMMA)] = p
        frame["accepted"] = acc
        frames.append(frame)
    return pd.concat(frames).sort_values(["seq_id", "round"], kind="stable").reset_index(drop=True)


def test_fitted_noise_recovers_the_known_noise():
    """28,000 cells: the noise's sampling s.e. is ~0.005, so 0.05 both catches a wrong estimator
    and separates 0.7 from 1.0 (power: each is recovered, not a common value)."""
    kw = {"spread": 1.0, "spread_req": 0.5, "overconf": 0.8}
    fits = {n: fit_confidence(recorded(n, seed=3, **kw)) for n in (0.7, 1.0)}
    for noise, fit in fits.items():
        assert fit.noise == pytest.approx(noise, abs=0.05), fit
        assert fit.overconf == pytest.approx(0.8, abs=0.02), fit
        assert fit.spread == pytest.approx(1.0, abs=0.05), fit
        assert fit.spread_req == pytest.approx(0.5, abs=0.1), fit
        np.testing.assert_allclose(logit(fit.q), logit(Q), atol=0.15)
    assert fits[1.0].noise - fits[0.7].noise > 0.2
    assert fit_confidence(recorded(1e-9, seed=4, **kw)).noise < 0.02


def closed_form_auc(m: float, spread: float, noise: float) -> float:
    """AUC of c = sigmoid(z + n) against Bernoulli(sigmoid(z)), z ~ N(m, spread^2), n ~ N(0,
    noise^2): P(z1 + n1 > z2 + n2) with z1 weighted by p, z2 by 1 - p (quadrature)."""
    z = np.linspace(m - 8 * spread, m + 8 * spread, 1601)
    dens = norm.pdf(z, m, spread) * (z[1] - z[0])
    pos, neg = expit(z) * dens, (1 - expit(z)) * dens
    if noise == 0:
        wins = (z[:, None] > z[None, :]) + 0.5 * (z[:, None] == z[None, :])
    else:
        wins = norm.cdf((z[:, None] - z[None, :]) / (noise * np.sqrt(2)))
    return float(pos @ wins @ neg / (pos.sum() * neg.sum()))


@pytest.mark.parametrize("noise", [0.0, 1.5])
def test_auc_has_its_closed_form(noise):
    """Position 1 with no request spread: every round's z ~ N(logit q1, spread^2), whatever the
    rounds' weights. Noise 0 gives the AUC of the true probabilities; ~10^5 rounds put the
    simulated AUC's s.e. near 0.002, and noise 1.5 moves it by ~0.08."""
    src = ParametricAcceptance(1, [DomainModel("d", (0.6,))], np.ones(1), 1.2, 0.0, noise=noise)
    rounds = served_rounds(src, 4000, 40, np.random.default_rng(7))
    simulated = discrimination(rounds.conf, rounds.accepted)[0]["auc"]
    assert simulated == pytest.approx(closed_form_auc(float(logit(0.6)), 1.2, noise), abs=0.008)
    assert abs(closed_form_auc(0.4, 1.2, 1.5) - closed_form_auc(0.4, 1.2, 0.0)) > 0.05


@given(
    noise=st.floats(1e-3, 5.0),
    spread=st.floats(0.0, 3.0),
    spread_req=st.floats(0.0, 2.0),
    rho=st.floats(0.0, 0.95),
    overconf=st.floats(0.2, 4.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_noise_changes_discrimination_only(noise, spread, spread_req, rho, overconf, seed):
    """Every acceptance draw, hence every acceptance mean, is the same at noise 0 and at any
    noise; the confidences differ."""
    out = {}
    for n in (0.0, noise):
        src = model(n, spread=spread, spread_req=spread_req, rho=rho, overconf=overconf)
        rng = np.random.default_rng(seed)
        src.bind(16, rng)
        out[n] = [src.draw(np.arange(i % 16, 16), rng) for i in range(6)]
    for (c0, a0), (c1, a1) in zip(out[0.0], out[noise], strict=True):
        assert np.array_equal(a0, a1)
        assert not np.array_equal(c0, c1)


@pytest.mark.parametrize("value", ["-0.5", "nan", "inf", "-inf"])
def test_bad_noise_is_one_line_exit_2(monkeypatch, capsys, value):
    spec = f"preset:dspark:chat[noise={value}]"
    code, out, err = run_cli(monkeypatch, capsys, "acceptance", "show", spec, "--requests", "5")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "noise" in err and "Traceback" not in err
