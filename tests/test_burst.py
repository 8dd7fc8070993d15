"""Several rounds per pass (dsim.engine.burst): the same engine, only the draws in another order.

With acceptance that leaves nothing to chance (every draft accepted, or none), a run with bursts
must equal the round-by-round run bit for bit: requests table and step log, through arrivals,
preemption, chunked prefill, output caps, a sequence cap and clusters. With random acceptance
the two agree in distribution (the closed form below; benchmarks/check_bursts.py for presets).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from dsim.engine import burst
from dsim.policies import parse_policy
from dsim.run import RunSpec, simulate

AZURE = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
PRESSURE = "synthetic:rate=20,n=150,prompt=600,output=300,sigma=0.5"
CASES = {
    "arrivals": {"trace": AZURE, "window": "0:120"},
    "preemption": {"trace": PRESSURE, "kv_tokens": 12_000},
    "chunked-prefill": {"trace": PRESSURE, "prefill_chunk": 256},
    "seq-cap": {"trace": PRESSURE, "max_seqs": 6},
    "least-loaded": {"trace": AZURE, "window": "0:120", "replicas": 2, "router": "least-loaded"},
    "disagg": {"trace": AZURE, "window": "0:120", "disagg": "1:1"},
}


@pytest.fixture
def count_bursts(monkeypatch):
    """Rounds run in bursts, counted as the engine commits them."""
    kept = []
    plan = burst.plan

    def counting(*args):
        b = plan(*args)
        kept.append(0 if b is None else b.rounds)
        return b

    monkeypatch.setattr(burst, "plan", counting)
    return kept


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests)
    for name, col in vars(a.steps).items():
        np.testing.assert_array_equal(col, getattr(b.steps, name), err_msg=name)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    ("policy", "acceptance"),
    [
        ("fixed:3", "iid:1.0"),
        ("threshold:0.5", "iid:1.0"),
        ("oracle", "iid:0.0"),
        ("mtp1", "iid:0.0"),
    ],
)
def test_bursts_equal_round_by_round_without_chance(count_bursts, case, policy, acceptance):
    spec = RunSpec(policy=policy, acceptance=acceptance, **CASES[case])
    by_round = simulate(RunSpec(**{**spec.as_dict(), "rounds_per_pass": 1}))
    assert not count_bursts  # rounds_per_pass 1 never tries one
    bursts = simulate(spec)
    # not vacuous: 4-20% of the rounds of two replicas (each stops at the other's steps), else
    # 14-96%
    assert sum(count_bursts) > 0.02 * bursts.summary["steps"]
    _same(by_round, bursts)


def test_no_burst_for_a_policy_that_is_not_row_wise(count_bursts):
    simulate(RunSpec(trace=AZURE, window="0:60", policy="dspark"))
    assert not count_bursts


def test_bursts_keep_the_iid_closed_form(count_bursts):
    """Random acceptance: tokens per round match 1 + a + ... + a^K (sd < 2 a round, > 20k
    rounds: 3 standard errors < 0.04), with most rounds in bursts."""
    res = simulate(
        RunSpec(
            trace="synthetic:rate=2,n=200,prompt=64,output=400,sigma=0",
            acceptance="iid:0.7",
            policy="fixed:4",
        )
    )
    assert sum(count_bursts) > 0.5 * res.summary["steps"]
    expected = (1 - 0.7**5) / (1 - 0.7)
    assert res.summary["accepted_length_mean"] == pytest.approx(expected, abs=0.04)


@pytest.mark.parametrize("spec", ["fixed:3", "threshold:0.4", "oracle", "ar", "mtp1"])
def test_row_wise_policies_choose_each_row_alone(spec):
    """What `row_wise` promises: stacked rounds get the lengths each round gets alone."""
    policy = parse_policy(spec)
    assert policy.row_wise
    rng = np.random.default_rng(0)
    conf, truth = rng.random((3, 5, 7)), rng.integers(0, 8, (3, 5))
    stacked = policy.lengths(conf.reshape(15, 7), None, truth.reshape(-1))
    alone = [policy.lengths(c, None, t) for c, t in zip(conf, truth, strict=True)]
    np.testing.assert_array_equal(stacked, np.concatenate(alone))


def test_rounds_per_pass_must_be_positive(monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "run", "--rounds-per-pass", "0", "--no-progress")
    assert code == 2
    assert "rounds_per_pass" in err and "Traceback" not in err
