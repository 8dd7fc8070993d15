"""`tau:T@K`: a stated mean acceptance length becomes a curve with that mean, served as stated.

T counts the bonus token (vLLM's mean acceptance length, 1 + accepted / drafts); the shape is
geometric (every draft accepted with one probability alpha), so T = (1 - alpha^(K+1)) /
(1 - alpha) is the closed form the implied curve must meet.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli, write_flat_profile
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.special import logit
from test_scrape_fit import Counting

from dsim.acceptance.parametric import FIT_REQUESTS, serving_curve
from dsim.acceptance.sources import parse_acceptance
from dsim.acceptance.tau import implied, implied_alpha
from dsim.engine.backend import Simulated
from dsim.errors import InputError
from dsim.pareto.config import load_config
from dsim.run import run_engine
from dsim.run_inputs import resolve
from dsim.run_spec import RunSpec
from dsim.spec_grammar import TauSpec


@given(st.integers(1, 16), st.floats(0.0, 1.0, exclude_min=True))
def test_the_implied_curve_has_the_stated_mean_length(drafts, share):
    """For every K in 1..16 and T in (1, K + 1]: 1 + the implied survivals sum to T, the
    conditional curve is flat (geometric), and alpha meets the closed form."""
    tau = 1.0 + share * drafts
    assume(tau > 1.0)
    acc = implied(TauSpec(tau, drafts))
    assert abs(acc.tau - tau) < 1e-9  # target: within 0.01
    alpha = implied_alpha(TauSpec(tau, drafts))
    np.testing.assert_allclose(acc.conditional, alpha, rtol=1e-9, atol=1e-300)
    closed = drafts + 1.0 if alpha == 1.0 else (1 - alpha ** (drafts + 1)) / (1 - alpha)
    assert closed == pytest.approx(tau, abs=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 16), st.floats(0.01, 0.99))
def test_the_fitted_latent_means_serve_the_stated_mean_length(drafts, share):
    """At the assumed spreads the latent means are fitted so that a run, pooling rounds as a
    server does, has the stated tau (the fit's own draws) within 0.01."""
    tau = 1.0 + share * drafts
    source = parse_acceptance(f"tau:{tau!r}@{drafts}", drafts)
    assert (source.spread, source.spread_req) == (1.0, 0.5)
    _, served = serving_curve(source.latent[0], 1.0, 0.5, n_req=FIT_REQUESTS)
    assert abs(served - tau) < 0.01


def test_a_run_measures_the_stated_tau(tmp_path):
    """End to end: a fixed:4 run of tau:2.8@4, its rounds counted as vLLM counts them."""
    spec = RunSpec(
        trace="synthetic:rate=50,n=3000,prompt=64,output=100,sigma=0",
        profile=str(write_flat_profile(tmp_path / "flat.csv", 10.0)),
        acceptance="tau:2.8@4",
        policy="fixed:4",
        gamma=4,
        seed=1,
    )
    inputs = resolve(spec)
    counting = Counting(inputs.acceptance)
    run_engine(inputs.engine, inputs.workload, Simulated(counting))
    measured = 1.0 + counting.per_position.sum() / counting.drafts
    assert abs(measured - 2.8) < 0.03  # ~10^5 rounds of 3,000 requests


def test_gamma_past_k_is_refused_and_below_it_truncates():
    with pytest.raises(
        InputError, match=r"^acceptance 'tau:2.8@4': .* 4 drafts .*--gamma 4 or less"
    ):
        parse_acceptance("tau:2.8@4", 5)
    short = parse_acceptance("tau:2.8@4", 2).latent[0]
    np.testing.assert_array_equal(short, parse_acceptance("tau:2.8@4", 4).latent[0][:2])


def test_options_and_mix_apply_as_to_every_parametric_spec():
    source = parse_acceptance("tau:2.8@4[spread=0,spread_req=0,noise=1]", 4)
    assert (source.spread, source.spread_req, source.noise) == (0.0, 0.0, 1.0)
    alpha = implied_alpha(TauSpec(2.8, 4))
    np.testing.assert_allclose(source.latent[0], logit(alpha), atol=1e-6)  # spreads 0: as is
    mix = parse_acceptance("mix:tau:2.8@4=1,tau:3.5@4=1", 4)
    assert [d.name for d in mix.domains] == ["tau:2.8@4", "tau:3.5@4"]


def test_show_prints_the_curve_and_what_is_assumed(monkeypatch, capsys):
    code, text, err = run_cli(monkeypatch, capsys, "acceptance", "show", "tau:2.8@4", "--json")
    assert code == 0 and err == ""
    report = json.loads(text)
    read = report["read"]
    assert report["gamma"] == 4 and read["kind"] == "tau"  # gamma defaults to K
    alpha = implied_alpha(TauSpec(2.8, 4))
    assert read["alpha"] == pytest.approx(alpha) and read["shape"].startswith("geometric")
    np.testing.assert_allclose(read["unconditional"], alpha ** np.arange(1, 5), rtol=1e-9)
    assert read["tau"][-1] == pytest.approx(2.8, abs=1e-9)
    # 2,000 requests x 300 tokens: the served tau within 0.01 + noise of the stated one
    assert abs(report["simulated"]["tau"][-1] - 2.8) < 0.03

    code, table, _ = run_cli(monkeypatch, capsys, "acceptance", "show", "tau:2.8@4")
    assert code == 0
    for said in (
        "implied by the stated tau",
        "bonus included",
        "shape (assumed): geometric",
        f"alpha = {alpha:.4f}",
        "(assumed: a stated tau has no per-request figures)",
        "spreads and noise: assumed",
    ):
        assert said in table, said
    rows = [line for line in table.splitlines() if line.startswith("│")]
    cells = [c.strip() for c in rows[1].split("│")[1:-1]]  # position 2: implied cond, uncond
    assert cells[:3] == ["2", f"{alpha:.4f}", f"{alpha**2:.4f}"]
    assert "implied" in table and "read" not in table.replace("spread", "")


def _sweep(tmp_path, acceptance: str):
    profile = write_flat_profile(tmp_path / "flat.csv", 10.0)
    path = tmp_path / "sweep.toml"
    path.write_text(
        'policies = ["fixed:4"]\n[run]\ntrace = "synthetic:n=20"\n'
        f'profile = "{profile}"\ngamma = 4\nacceptance = "{acceptance}"\n'
        "[load]\nrate_scale = [1]\n"
    )
    return path


def test_a_sweep_configs_run_table_takes_it(tmp_path):
    assert load_config(_sweep(tmp_path, "tau:2.8@4")).base.acceptance == "tau:2.8@4"
    with pytest.raises(InputError, match=r"run\.acceptance: acceptance 'tau:2\.8@3': .*--gamma 3"):
        load_config(_sweep(tmp_path, "tau:2.8@3"))
