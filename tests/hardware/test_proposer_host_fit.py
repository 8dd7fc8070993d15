"""Current vLLM's host time per proposer step (addendum 5 of docs/engine-v2-rules.md): the rows
as the post prints them, the reading's invariants, the grid fit and the adoption rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsim.hardware import engines, proposer_host_fit, round_fit
from dsim.hardware.gpu_model import SpecRound

FIT = proposer_host_fit


def test_rows_are_the_posts_ratios():
    """Figure 4-6 captions at c = 1: 1.55, 1.55, 1.69; 21 rows, seven concurrencies each."""
    rows = FIT.rows()
    assert len(rows) == 21
    at_one = {r.benchmark: r.measured for r in rows if r.concurrency == 1}
    assert at_one == {"MT-Bench": 1.55, "HumanEval": 1.55, "SPEED-Bench": 1.69}
    assert [r.concurrency for r in rows if r.benchmark == "HumanEval"] == list(FIT.CONCURRENCY)


def test_peagle_pass_is_priced_by_the_drafter_owner():
    """One P-EAGLE pass (four layers over 2K tokens per request) costs more GPU work than one
    EAGLE-3 pass over one token and less than the verify step: `draft_pass` prices it."""
    parts = FIT._parts(1, FIT.PEAGLE_K)
    assert parts["peagle"] > parts["eagle_rest"] > 0
    assert parts["verify"] > parts["peagle"]


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 2e-3), st.floats(0.0, 2e-3))
def test_ratio_grows_with_the_host_floor(a, b):
    """EAGLE-3 pays K = 3 floors a round, P-EAGLE one: a higher floor can only raise P/E."""
    lo, hi = sorted((a, b))
    row = FIT.rows()[0]
    per_round = round_fit.spec_rounds()["vllm-0.8"].per_round_s
    assert (
        FIT.predict(row, SpecRound(per_round, hi))
        >= FIT.predict(row, SpecRound(per_round, lo)) - 1e-12
    )


def test_ratio_is_the_closed_form():
    """P/E = (AL_P / AL_E) x round_E / round_P with the rounds built from their parts."""
    row, terms = FIT.rows()[0], SpecRound(2e-4, 3e-4)
    p3, p7 = FIT._parts(1, 3), FIT._parts(1, 7)
    eagle = p3["verify"] + sum(max(g, 3e-4) for g in [p3["eagle_first"]] + 2 * [p3["eagle_rest"]])
    peagle = p7["verify"] + max(p7["peagle"], 3e-4)
    want = (3.70 / 2.70) * (eagle + 2e-4) / (peagle + 2e-4)
    assert FIT.predict(row, terms) == pytest.approx(want, rel=1e-12)


def test_fit_is_the_grid_argmin():
    """No grid point fits the concurrency-1 rows better than the fitted value."""
    fitted = [r for r in FIT.rows() if r.concurrency == 1]

    def loss(host: float) -> float:
        return sum((FIT.predict(r, FIT._with_host(host)) / r.measured - 1) ** 2 for r in fitted)

    best = FIT.result().host_s
    assert best in round_fit.HOST_GRID
    assert all(loss(best) <= loss(float(h)) + 1e-15 for h in round_fit.HOST_GRID[::7])


def test_adoption_rule_and_the_preset():
    """Adopted by the rule (inside [0, transfer], evaluation rows no worse than the transfer),
    so `vllm` carries the fitted floor and `vllm-0.8` keeps E126's."""
    res = FIT.result()
    inside = 0 <= res.host_s <= res.transfer_s
    assert res.adopted == (inside and res.eval_median <= res.transfer_eval_median)
    current, old = engines.get_engine("vllm", "h200"), engines.get_engine("vllm-0.8", "h200")
    assert old.spec_round == round_fit.spec_rounds()["vllm-0.8"]
    if res.adopted:
        assert current.spec_round.host_pass_s == pytest.approx(res.host_s)
        assert current.spec_round.per_round_s == old.spec_round.per_round_s
        assert "addendum 5" in current.spec_round_source
    else:
        assert current.spec_round == old.spec_round


def test_rejected_fit_keeps_the_transfer(monkeypatch):
    """Where the rule rejects the fit the preset keeps vLLM 0.8's terms and says so."""
    rejected = FIT.Result(1.0, 1e-3, False, 0.0, 0.5, 0.1, {}, [])
    monkeypatch.setattr(FIT, "result", lambda: rejected)
    terms, source = FIT.current_round()
    assert terms == round_fit.spec_rounds()["vllm-0.8"]
    assert "not adopted" in source


def test_every_benchmark_alone_lands_inside_the_transfer():
    """The sensitivity the rule asks for: each benchmark's c = 1 row alone."""
    res = FIT.result()
    assert set(res.by_benchmark_s) == {"MT-Bench", "HumanEval", "SPEED-Bench"}
    assert all(0 < v < res.transfer_s for v in res.by_benchmark_s.values())
    assert np.isfinite(res.eval_median)
