"""Closed-loop clients (`synthetic:...,concurrency=N`): at most N requests in flight, a new one
sent when one finishes, TTFT counted from the send; and the benchmark's pooled ITL."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import write_flat_profile

from dsim.cli import main
from dsim.engine.steplog import StepLog
from dsim.metrics import pooled_itl
from dsim.run import RunSpec, simulate

L_MS = 10.0


@pytest.fixture
def flat(tmp_path):
    return str(write_flat_profile(tmp_path / "flat.csv", L_MS))


def in_flight_max(req) -> int:
    """Most requests sent and not finished at any instant (a finish frees its slot at once)."""
    events = [(t, 1) for t in req["arrival_s"]] + [(t, -1) for t in req["finish_s"]]
    events.sort(key=lambda e: (e[0], e[1]))  # at a tie, the finish first
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_one_at_a_time_is_the_closed_form(flat):
    """c = 1 on a flat 10 ms step: each request takes `output` steps (the prefill step emits the
    first token) and the next is sent at that finish."""
    trace = "synthetic:n=4,prompt=64,output=5,sigma=0,concurrency=1"
    req = simulate(RunSpec(trace=trace, profile=flat, policy="ar")).requests
    np.testing.assert_allclose(req["arrival_s"], [0.0, 0.05, 0.10, 0.15], atol=1e-12)
    np.testing.assert_allclose(req["finish_s"] - req["arrival_s"], 0.05, atol=1e-12)
    np.testing.assert_allclose(req["first_token_s"] - req["arrival_s"], 0.01, atol=1e-12)


@pytest.mark.parametrize(("concurrency", "replicas"), [(3, 1), (5, 1), (4, 2)])
def test_never_more_in_flight_than_the_limit_and_sent_no_earlier_than_due(
    flat, concurrency, replicas
):
    trace = f"synthetic:rate=50,n=60,prompt=200,output=40,sigma=0.8,concurrency={concurrency}"
    spec = RunSpec(trace=trace, profile=flat, policy="mtp1", replicas=replicas, max_seqs=64)
    req = simulate(spec).requests
    due = simulate(RunSpec(**{**spec.as_dict(), "trace": trace.split(",concurrency")[0]}))
    assert in_flight_max(req) == concurrency
    assert (req["arrival_s"].to_numpy() >= due.requests["arrival_s"].to_numpy() - 1e-12).all()
    assert (req["first_token_s"] > req["arrival_s"]).all()


def test_a_limit_no_run_reaches_is_the_open_loop_run(flat):
    open_loop = "synthetic:rate=20,n=30,prompt=100,output=30"
    a = simulate(RunSpec(trace=open_loop, profile=flat, seed=2)).requests
    b = simulate(RunSpec(trace=open_loop + ",concurrency=1000", profile=flat, seed=2)).requests
    for col in ("arrival_s", "first_token_s", "finish_s", "output_tokens"):
        np.testing.assert_array_equal(a[col].to_numpy(), b[col].to_numpy())


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        ("synthetic:n=5,concurrency=0", "concurrency"),
        ("synthetic:n=5,concurrency=-2", "concurrency"),
        ("synthetic:n=5,concurrency=nan", "concurrency"),
        ("synthetic:n=5,concurrency=1.5", "concurrency"),
        ("synthetic:concurrency=4", "concurrency without rate needs n="),
    ],
)
def test_bad_concurrency_is_one_line_and_writes_nothing(
    monkeypatch, capsys, tmp_path, trace, message
):
    out = tmp_path / "o"
    argv = ["dsim", "run", "--trace", trace, "--out", str(out), "--no-progress"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert not out.exists()


# -- the benchmark's ITL: gaps pooled over all requests ----------------------------------------


def test_pooled_itl_counts_each_step_once_per_decoding_request():
    z = np.zeros(4)
    steps = StepLog(z, np.array([0.5, 0.001, 0.002, 0.003]), np.array([0, 1, 1, 10]), z, z, z)
    # gaps: 1 x 1 ms, 1 x 2 ms, 10 x 3 ms (the step with no decoding request gives none)
    assert pooled_itl(steps, 50) == 0.003
    assert pooled_itl(steps, 5) == 0.001
    assert pooled_itl(steps, 99) == 0.003


def test_itl_on_a_flat_profile_is_the_step_and_the_summary_has_it(flat):
    trace = "synthetic:rate=20,n=20,prompt=100,output=30,concurrency=4"
    summary = simulate(RunSpec(trace=trace, profile=flat, policy="ar")).summary
    assert summary["itl_p50_s"] == pytest.approx(L_MS / 1e3)
    assert summary["itl_p99_s"] == pytest.approx(L_MS / 1e3)
