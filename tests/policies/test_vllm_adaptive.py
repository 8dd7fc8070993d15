"""`vllm-adaptive` (dsim/policies/vllm_adaptive.py): its budget against brute force on a
staircase profile, its startup tables, its lag, the step the replica hands it, the step the
synchronous policies see, and its bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import refused
from hypothesis import given, settings
from hypothesis import strategies as st

from dsim.engine.backend import Simulated
from dsim.policies import DSpark, parse_policy
from dsim.policies.protocol import EngineCosts, StepContext
from dsim.policies.vllm_adaptive import (
    FP32_BYTES,
    MAX_CHUNK_BYTES,
    allocate,
    build_table,
    profile_sizes,
)
from dsim.run import run_engine
from dsim.run_inputs import PolicyFactory, resolve
from dsim.run_spec import RunSpec

PROFILE = "profiles/h200-qwen3-8b-roofline.csv"
TRACE = "synthetic:rate=20,n=60,prompt=300,output=80"
DYADIC = (0.0, 0.25, 0.5, 0.75, 1.0)  # survivals and their sums exact in floats


def padded_cost(n: int, captures: tuple[int, ...], latency: np.ndarray) -> float:
    """The staircase by its definition: a step of n tokens runs at the next captured size and
    costs the most any captured size up to that one costs (the engine's running max)."""
    pad = min(c for c in captures if c >= n)
    return max(float(latency[c]) for c in captures if c <= pad)


def best_sum(survival: np.ndarray, b: int) -> float:
    """The largest total survival of any b drafts taken as a prefix of each request: every
    split of b over the requests, enumerated."""
    r, gamma = survival.shape
    sums = np.concatenate([np.zeros((r, 1)), np.cumsum(survival, axis=1)], axis=1)
    best = -np.inf
    for split in itertools.product(range(gamma + 1), repeat=r):
        if sum(split) == b:
            best = max(best, sum(sums[i, k] for i, k in enumerate(split)))
    return best


@st.composite
def staircase_steps(draw):
    r, gamma = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    conf = np.array(draw(st.lists(st.sampled_from(DYADIC), min_size=r * gamma,
                                  max_size=r * gamma))).reshape(r, gamma)  # fmt: skip
    prefill = draw(st.integers(0, 6))
    num_reqs = r + draw(st.integers(0, 2)) * (prefill > 0)
    t = r + prefill
    top = t + r * gamma + draw(st.integers(0, 5))  # every step within the largest capture
    inner = draw(st.lists(st.integers(1, top - 1), max_size=6, unique=True)) if top > 1 else []
    captures = tuple(sorted({*inner, top}))
    latency = np.array(draw(st.lists(st.integers(1, 50), min_size=top + 1, max_size=top + 1)))
    logits = draw(st.integers(1, r * gamma + num_reqs + 2))
    sampling = draw(st.integers(0, num_reqs))
    draft_ms = draw(st.integers(0, 20))
    return conf, captures, latency, logits, sampling, num_reqs, t, draft_ms


@settings(max_examples=300)
@given(staircase_steps())
def test_the_budget_is_the_brute_force_argmax_of_its_objective_on_a_staircase(case):
    conf, captures, latency, logits, sampling, num_reqs, t, draft_ms = case
    r, gamma = conf.shape
    costs = EngineCosts(
        verify_s=lambda n, seqs, ctx: float(latency[n]),
        draft_s=lambda seqs, ctx: float(draft_ms),
        capture_sizes=captures,
        max_tokens=captures[-1],
        max_reqs=num_reqs,
        gamma=gamma,
        vocab=MAX_CHUNK_BYTES // (logits * FP32_BYTES),  # a sampler chunk of `logits` rows
    )
    step = StepContext(num_reqs, t, sampling, np.arange(r), costs)
    policy = parse_policy("vllm-adaptive")
    survival = np.cumprod(conf, axis=1)
    cap = min(r * gamma, max(0, logits - num_reqs))
    value = [
        (sampling + best_sum(survival, b)) / (draft_ms + padded_cost(t + b, captures, latency))
        for b in range(cap + 1)
    ]
    assert policy.budget(conf, step) == int(np.argmax(value))


def test_startup_sizes_are_the_captures_then_one_and_a_half_times_then_doublings():
    assert profile_sizes((1, 2, 4, 8), 40) == ([1, 2, 4, 8, 12, 16, 32, 40], 8)
    assert profile_sizes((), 10) == ([1, 2, 4, 8, 10], 0)


def test_a_table_is_monotone_padded_below_the_limit_and_interpolated_above():
    curve = [(2, 5.0), (4, 3.0), (8, 9.0), (12, 11.0), (20, 15.0)]
    table = build_table(curve, 24, 8, "t")
    np.testing.assert_array_equal(table[:9], [5, 5, 5, 5, 5, 9, 9, 9, 9])  # running max, padded
    assert table[10] == 11.0  # past the limit, never blended with the last captured size
    assert table[16] == 13.0  # between profiled points past the limit: nothing pads
    assert table[24] == 17.0  # past the last point: its slope


def test_allocation_takes_the_best_current_survivals_as_prefixes():
    conf = np.array([[0.9, 0.9, 0.1], [0.5, 1.0, 1.0]])
    np.testing.assert_array_equal(allocate(conf, 0), [0, 0])
    np.testing.assert_array_equal(allocate(conf, 3), [2, 1])  # 0.9, 0.81, then 0.5 ties 0.5
    np.testing.assert_array_equal(allocate(conf, 5), [2, 3])
    np.testing.assert_array_equal(allocate(conf, 6), [3, 3])


def _step(ids, costs):
    return StepContext(len(ids), len(ids), len(ids), np.asarray(ids), costs)


@pytest.mark.parametrize("lag", [1, 2])
def test_the_budget_reads_the_confidences_lag_rounds_old_by_request(lag):
    costs = EngineCosts(lambda n, s, c: 1.0 + 0.1 * n, lambda s, c: 0.0, (), 64, 8, 2, 0)
    policy = parse_policy(f"vllm-adaptive:lag={lag}")
    rounds = [([5, 7], [[0.9, 0.8], [0.1, 0.2]]), ([7, 9], [[0.3, 0.3], [0.6, 0.6]])]
    for ids, conf in rounds:
        policy.lengths(np.array(conf), None, None, _step(ids, costs))
    stale = policy.stale(np.array([9, 7, 5]), 2)
    if lag == 1:  # the last round: 9 and 7 ran, 5 did not
        np.testing.assert_array_equal(stale, [[0.6, 0.6], [0.3, 0.3], [1.0, 1.0]])
    else:  # the round before: 7 and 5 ran
        np.testing.assert_array_equal(stale, [[1.0, 1.0], [0.1, 0.2], [0.9, 0.8]])


def _spec(policy: str, **kw) -> RunSpec:
    base = dict(trace=TRACE, profile=PROFILE, acceptance="preset:dspark:chat", gamma=7)
    return RunSpec(policy=policy, **{**base, **kw})


def test_the_replica_hands_the_step_its_shape_and_the_engine_its_captures():
    seen: list[StepContext] = []

    class Spy:
        drafts, synchronous, reads_step = True, False, True

        def lengths(self, conf, sps, truth, step):
            seen.append(step)
            return np.zeros(conf.shape[0], np.int64)

    inputs = resolve(_spec("vllm-adaptive", prefill_chunk=128))  # 300-token prompts: 3 chunks
    assert inputs.engine.config.shape.capture_sizes[-1] == 512
    assert inputs.engine.config.shape.vocab == 151936
    spy = Spy()
    engine = replace(inputs.engine, policy=PolicyFactory("spy", lambda: spy, spy))
    result = run_engine(engine, inputs.workload, Simulated(inputs.acceptance))
    steps = result.steps
    decode = steps.num_running > 0
    assert len(seen) == decode.sum()
    for step, running, prefill in zip(
        seen, steps.num_running[decode], steps.prefill_tokens[decode], strict=True
    ):
        assert step.non_draft_tokens == running + prefill  # T: one a request plus the chunks
        assert running <= step.num_sampling <= step.num_reqs
        assert (step.num_reqs > running) == (prefill > 0)
        assert len(step.ids) == running
    assert any(s.num_sampling < s.num_reqs for s in seen)  # a chunk mid-prompt samples nothing


def test_a_synchronous_policy_reads_the_step_the_replica_charges():
    """SPS(B) at the lengths chosen is 1 / the step's charge, drafter and scheduling cost
    included, on an engine whose graphs pad (item 3: a trimmed draft saves what it saves)."""
    seen: list[float] = []

    class Spy(DSpark):
        def lengths(self, conf, sps, truth):
            out = super().lengths(conf, sps, truth)
            seen.append(float(sps(np.array([conf.shape[0] + int(out.sum())]))[0]))
            return out

    inputs = resolve(_spec("dspark", sched_cost="auto"))
    spy = Spy()
    engine = replace(inputs.engine, policy=PolicyFactory("spy", lambda: spy, spy))
    steps = run_engine(engine, inputs.workload, Simulated(inputs.acceptance)).steps
    charged = steps.latency_s[steps.num_running > 0]
    assert len(seen) == len(charged) > 10
    np.testing.assert_allclose(1.0 / np.array(seen), charged, rtol=1e-12)


def test_vllm_adaptive_runs_and_trims_some_drafts_but_not_all():
    inputs = resolve(_spec("vllm-adaptive"))
    result = run_engine(inputs.engine, inputs.workload, Simulated(inputs.acceptance))
    assert np.isfinite(result.requests["finish_s"]).all()
    assert 1.0 < result.summary["mean_verify_budget"] < 1 + 7


# -- bad input: one line, exit 2, nothing written --------------------------------------------
ARGS = ("--trace", TRACE, "--profile", PROFILE, "--acceptance", "iid:0.7")


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ("vllm-adaptive:lag=0", "unknown lag '0'"),
        ("vllm-adaptive:lag=soon", "unknown lag"),
        ("vllm-adaptive:capture=1/8/4", "increasing order"),
        ("vllm-adaptive:capture=4/4", "increasing order"),
        ("vllm-adaptive:depth=3", "unknown option 'depth'"),
    ],
)
def test_bad_options_are_one_line(monkeypatch, capsys, tmp_path, policy, words):
    assert words in refused(monkeypatch, capsys, tmp_path, *ARGS, "--policy", policy)


@pytest.mark.parametrize("ms", ["inf", "nan", "-1", "0"])
def test_a_cost_table_with_a_non_finite_entry_is_one_line(monkeypatch, capsys, tmp_path, ms):
    costs = tmp_path / "costs.csv"
    costs.write_text(f"table,size,ms\ndraft,1,0.5\nverify,1,4.0\nverify,8,{ms}\n")
    err = refused(monkeypatch, capsys, tmp_path, *ARGS, "--policy", f"vllm-adaptive:costs={costs}")
    assert "costs.csv" in err and "row 3" in err.lower().replace(":", " ")  # the 3rd data row


@pytest.mark.parametrize("rows", ["verify,1,1\nverify,1,5", "verify,4,1\nverify,1,2\nverify,4,3"])
def test_a_size_twice_in_a_cost_table_is_one_line(monkeypatch, capsys, tmp_path, rows):
    costs = tmp_path / "costs.csv"
    costs.write_text(f"table,size,ms\ndraft,1,0.2\n{rows}\n")
    err = refused(monkeypatch, capsys, tmp_path, *ARGS, "--policy", f"vllm-adaptive:costs={costs}")
    assert "is in the verify table twice" in err and "row" in err


@pytest.mark.parametrize(
    ("option", "words"),
    [
        ("context=1e30", "must be an integer"),
        ("context=0.5", "must be an integer"),
        ("context=0", ">= 1 and <= 1048576"),
        ("context=2000000", ">= 1 and <= 1048576"),
        ("capture=1/2/100000000", "above the step token limit"),
    ],
)
def test_a_context_or_capture_out_of_range_is_one_line(
    monkeypatch, capsys, tmp_path, option, words
):
    policy = f"vllm-adaptive:{option}"
    assert words in refused(monkeypatch, capsys, tmp_path, *ARGS, "--policy", policy)


@pytest.mark.parametrize(
    ("sizes", "words"),
    [([1, 8, 4], "increasing order"), ([1, 2, 10**8], "above the engine's step token budget")],
)
def test_a_sidecar_capture_table_not_increasing_is_one_line(
    monkeypatch, capsys, tmp_path, sizes, words
):
    side = json.loads(Path(PROFILE).with_suffix(".json").read_text())
    side["engine"]["graphs"]["sizes"] = sizes
    prof = tmp_path / "p.csv"
    prof.write_text(Path(PROFILE).read_text())
    prof.with_suffix(".json").write_text(json.dumps(side))
    args = ("--trace", TRACE, "--profile", str(prof), "--acceptance", "iid:0.7")
    err = refused(monkeypatch, capsys, tmp_path, *args, "--policy", "vllm-adaptive")
    assert "engine graphs sizes" in err and words in err


def test_given_cost_curves_replace_the_profile(tmp_path):
    costs = tmp_path / "costs.csv"
    costs.write_text("table,size,ms\ndraft,1,1\ndraft,64,2\nverify,8,5\nverify,4096,80\n")
    inputs = resolve(_spec(f"vllm-adaptive:costs={costs}"))
    result = run_engine(inputs.engine, inputs.workload, Simulated(inputs.acceptance))
    assert np.isfinite(result.requests["finish_s"]).all()
