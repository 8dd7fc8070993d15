"""The step token budget (`--max-num-batched-tokens`): verify tokens first, prefill the rest."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import write_flat_profile
from hypothesis import given, settings
from hypothesis import strategies as st

from dsim.run import simulate
from dsim.run_spec import RunSpec

TRACE = "synthetic:rate=30,n=60,prompt=600,output=40"


def run(tmp_path, **kw):
    profile = write_flat_profile(tmp_path / "flat.csv", 10.0)
    base = dict(trace=TRACE, profile=str(profile), acceptance="iid:0.7", draft_cost="0")
    return simulate(RunSpec(**{**base, **kw}))


@settings(max_examples=8, deadline=None)
@given(st.integers(20, 600), st.sampled_from(["ar", "fixed:3"]))
def test_every_step_keeps_within_the_budget(tmp_path_factory, budget, policy):
    """ar verifies 1 token per request, fixed:3 (gamma 3) 4: the reserve is exact, so a step's
    tokens never exceed the budget once the batch's own verify tokens fit in it."""
    tmp = tmp_path_factory.mktemp("budget")
    steps = run(tmp, policy=policy, gamma=3, max_num_batched_tokens=budget).steps
    look = 1 if policy == "ar" else 4
    fits = steps.num_running * look <= budget
    assert (steps.batch_tokens[fits] <= budget).all()
    assert (steps.prefill_tokens <= np.maximum(budget - steps.num_running * look, 0)).all()


def test_one_running_request_leaves_budget_minus_its_tokens_to_a_prompt(tmp_path):
    """Closed form: request 0 decodes alone (ar: 1 verify token a step) while request 1's prompt
    of 1000 tokens is prefilled at budget - 1 = 99 tokens a step: ceil(1000 / 99) = 11 steps."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00.000,10,500\n"
        "2023-11-16 18:00:00.500,1000,2\n"
    )
    steps = run(tmp_path, trace=str(trace), policy="ar", max_num_batched_tokens=100).steps
    late = steps.start_s >= 0.5
    chunks = steps.prefill_tokens[late & (steps.prefill_tokens > 0)]
    assert chunks.tolist() == [99] * 10 + [10]


@pytest.mark.parametrize("policy", ["dspark", "fixed:3"])
def test_a_budget_that_never_binds_changes_nothing(tmp_path, policy):
    """A budget above prefill_chunk + every verify token is the same run as no budget."""
    free = run(tmp_path, policy=policy, prefill_chunk=2048)
    loose = run(tmp_path, policy=policy, prefill_chunk=2048, max_num_batched_tokens=10**7)
    assert free.requests.equals(loose.requests)
    np.testing.assert_array_equal(free.steps.latency_s, loose.steps.latency_s)


def test_a_tight_budget_slows_prefill(tmp_path):
    free = run(tmp_path, policy="fixed:3", gamma=3)
    tight = run(tmp_path, policy="fixed:3", gamma=3, max_num_batched_tokens=128)
    assert tight.summary["ttft_p50_s"] > free.summary["ttft_p50_s"]
    assert tight.steps.prefill_tokens.max() <= 128


def test_bad_budget_is_one_clear_line(monkeypatch, capsys, tmp_path):
    import sys

    from dsim.cli import main

    for bad in ("0", "-5"):
        out = tmp_path / "o"
        argv = ["dsim", "run", "--trace", "synthetic:n=5", "--max-num-batched-tokens", bad]
        monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out), "--no-progress"])
        with pytest.raises(SystemExit) as exc:
            main()
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1
        assert "max_num_batched_tokens" in err.replace("-", "_") and not out.exists()
