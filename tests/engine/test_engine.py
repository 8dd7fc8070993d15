"""The simulator against closed forms, and its invariants and determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import KV_PRESSURE, ROOT, write_flat_profile, write_trace

from dsim.run import RunSpec, simulate, write_run

L_MS = 10.0


@pytest.fixture
def flat(tmp_path):
    return str(write_flat_profile(tmp_path / "flat.csv", L_MS))


@pytest.mark.parametrize(("policy", "k"), [("ar", 0), ("mtp1", 1), ("fixed:3", 3), ("fixed:7", 7)])
def test_single_request_closed_form(sim, tmp_path, flat, policy, k):
    """All drafts accepted, flat profile: TTFT is one step, each round emits 1 + K tokens."""
    out = 50
    trace = write_trace(tmp_path / "t.jsonl", [0.0], [100], [out])
    res = sim(
        trace=str(trace), profile=flat, acceptance="iid:1.0", policy=policy, gamma=7, draft_cost="0"
    )
    r = res.requests.iloc[0]
    rounds = math.ceil((out - 1) / (k + 1))
    L = L_MS / 1e3
    assert r["rounds"] == rounds
    assert r["first_token_s"] == pytest.approx(L)
    assert r["finish_s"] == pytest.approx(L * (1 + rounds))
    assert res.summary["tpot_p50_s"] == pytest.approx(rounds * L / (out - 1))
    assert r["verified_drafts"] == k * rounds


def test_draft_cost_ratio_adds_to_each_round(sim, tmp_path, flat):
    trace = write_trace(tmp_path / "t.jsonl", [0.0], [10], [21])
    res = sim(
        trace=str(trace),
        profile=flat,
        acceptance="iid:0.0",
        policy="fixed:2",
        draft_cost="ratio:0.5",
    )
    # every draft rejected: 20 rounds of one token, each 1.5 steps long
    assert res.requests.iloc[0]["finish_s"] == pytest.approx(L_MS / 1e3 * (1 + 20 * 1.5))


@pytest.mark.parametrize(("alpha", "k"), [(0.6, 3), (0.85, 5)])
def test_iid_tokens_per_round_matches_closed_form(sim, flat, alpha, k):
    res = sim(
        trace="synthetic:rate=2,n=150,prompt=64,output=400,sigma=0",
        profile=flat,
        acceptance=f"iid:{alpha}",
        policy=f"fixed:{k}",
        gamma=7,
    )
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    # per-round tokens have sd < 2 and there are > 15k rounds: 3 standard errors < 0.05
    assert res.summary["accepted_length_mean"] == pytest.approx(expected, abs=0.05)


def test_md1_waiting_time(sim, flat):
    """No speculation, one request at a time, Poisson arrivals: M/D/1 mean wait."""
    out, rho = 4, 0.5
    service = out * L_MS / 1e3  # prefill step + (out - 1) rounds
    rate = rho / service
    res = sim(
        trace=f"synthetic:rate={rate},n=30000,prompt=32,output={out},sigma=0,cv=1",
        profile=flat,
        acceptance="iid:0.5",
        policy="ar",
        max_seqs=1,
        seed=3,
    )
    wait = (res.requests["first_token_s"] - res.requests["arrival_s"] - L_MS / 1e3).mean()
    expected = rho * service / (2 * (1 - rho))
    assert wait == pytest.approx(expected, rel=0.05)


# DSpark paper, Table 1 (block 7, temperature 1): GSM8K, HumanEval, MT-Bench
TABLE1 = {
    "qwen3-4b": {
        "eagle3": (5.14, 4.16, 2.39),
        "dflash": (5.40, 4.74, 3.07),
        "dspark": (6.11, 5.38, 3.64),
    },
    "qwen3-8b": {
        "eagle3": (5.30, 4.33, 2.66),
        "dflash": (5.33, 4.64, 3.11),
        "dspark": (6.17, 5.52, 3.72),
    },
    "qwen3-14b": {
        "eagle3": (5.24, 4.14, 2.62),
        "dflash": (5.41, 4.59, 3.10),
        "dspark": (6.21, 5.43, 3.70),
    },
}


@pytest.mark.parametrize("target", ["", ":qwen3-4b", ":qwen3-8b", ":qwen3-14b"])
@pytest.mark.parametrize("preset", ["eagle3", "dflash", "dspark"])
@pytest.mark.parametrize(("domain", "column"), [("math", 0), ("code", 1), ("chat", 2)])
def test_presets_reproduce_reference_tau(sim, flat, preset, domain, column, target):
    """A serving run at full verification accepts Table 1's tau (no target = Qwen3-8B)."""
    reference = TABLE1[target[1:] or "qwen3-8b"][preset][column]
    res = sim(
        trace="synthetic:rate=5,n=400,prompt=64,output=300,sigma=0",
        profile=flat,
        acceptance=f"preset:{preset}:{domain}{target}",
        policy="fixed:7",
        gamma=7,
        seed=1,
    )
    assert res.summary["accepted_length_mean"] == pytest.approx(reference, rel=0.03)


def test_kv_pressure_preempts_and_still_conserves_tokens(sim):
    """A KV budget far below demand forces preemption; invariants hold (checked by `sim`)."""
    res = sim(**KV_PRESSURE)
    assert res.summary["preemptions"] > 0
    assert res.summary["kv_peak_blocks"] <= res.summary["kv_capacity_blocks"]


def test_max_seqs_caps_the_running_batch(sim):
    res = sim(
        trace="synthetic:rate=40,n=200,prompt=100,output=100",
        acceptance="iid:0.7",
        policy="fixed:2",
        max_seqs=5,
    )
    assert res.steps.num_running.max() <= 5


def test_same_seed_gives_identical_bytes(tmp_path):
    spec = RunSpec(
        trace="synthetic:rate=8,n=300,cv=2",
        acceptance="preset:dspark:chat",
        policy="dspark",
        seed=7,
    )
    for name in ("a", "b"):
        write_run(simulate(spec), spec, tmp_path / name)
    a, b = ((tmp_path / n / "requests.parquet").read_bytes() for n in "ab")
    assert a == b
    other = RunSpec(**{**spec.as_dict(), "seed": 8})
    write_run(simulate(other), other, tmp_path / "c")
    assert (tmp_path / "c" / "requests.parquet").read_bytes() != a


def test_azure_window_is_taken_on_the_scaled_timeline(sim):
    """At rate scale 2 the window 0:60 holds the trace's first 120 s, twice as fast."""
    trace = str(ROOT / "traces/azure2023/AzureLLMInferenceTrace_code.csv")
    base = sim(trace=trace, window="0:120", policy="fixed:3")
    double = sim(trace=trace, window="0:60", rate_scale=2.0, policy="fixed:3")
    assert base.summary["requests"] == double.summary["requests"] > 0
    assert double.requests["arrival_s"].max() < 60
    np.testing.assert_allclose(double.requests["arrival_s"] * 2, base.requests["arrival_s"])


def test_mooncake_trace_loads(sim):
    res = sim(
        trace=str(ROOT / "traces/mooncake/conversation_trace.jsonl"), max_requests=40, policy="mtp1"
    )
    assert res.summary["requests"] == 40
    assert res.summary["mean_verify_budget"] == pytest.approx(2.0)


def test_burstgpt_trace_skips_failed_requests(sim, tmp_path):
    trace = tmp_path / "burst.csv"
    trace.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,100,20,120,Conversation log\n"
        "6,ChatGPT,50,0,50,Conversation log\n"
        "9.5,GPT-4,80,30,110,API log\n"
    )
    res = sim(trace=str(trace), policy="fixed:2")
    assert res.requests["output_tokens"].tolist() == [20, 30]
    assert res.requests["arrival_s"].tolist() == [0.0, 4.5]


def test_synthetic_gamma_arrivals_are_bursty():
    from dsim.workload import synthetic

    def cv(spec):
        gaps = np.diff(synthetic(spec, seed=0).arrival_s)
        return gaps.std() / gaps.mean()

    assert cv("synthetic:rate=10,n=20000,cv=1") == pytest.approx(1.0, abs=0.05)
    assert cv("synthetic:rate=10,n=20000,cv=3") == pytest.approx(3.0, rel=0.1)
    w = synthetic("synthetic:rate=10,n=20000,prompt=500,output=100,sigma=0.5", seed=0)
    assert w.prompt_tokens.mean() == pytest.approx(500, rel=0.03)
    assert len(w) / w.arrival_s[-1] == pytest.approx(10, rel=0.03)


def test_plain_decoding_draws_nothing_and_asks_no_policy(flat):
    """`ar` runs no drafter, so a round verifies no draft: the engine neither draws from the
    acceptance model nor asks the policy for lengths, and each request emits one token a round
    (the first comes from prefill)."""
    from dsim.acceptance.sources import parse_acceptance
    from dsim.engine.backend import Simulated
    from dsim.run import run_engine
    from dsim.run_inputs import resolve_engine
    from dsim.workload import Workload

    def refuse(*args):
        raise AssertionError("asked during plain decoding")

    backend = Simulated(parse_acceptance("iid:1.0", 3))
    backend.draw = refuse
    inputs = resolve_engine(RunSpec(profile=flat, policy="ar", gamma=3))
    inputs.policy.first.lengths = refuse  # the one replica's policy
    workload = Workload(np.zeros(3), np.array([10, 20, 30]), np.array([5, 40, 1]), "test")
    req = run_engine(inputs, workload, backend).requests
    assert req["output_tokens"].tolist() == [5, 40, 1]
    assert req["rounds"].tolist() == [4, 39, 0]
    assert (req["verified_drafts"] == 0).all() and (req["accepted_drafts"] == 0).all()


@pytest.mark.parametrize("rows", [0, 1, 5, 128])
def test_a_plain_round_is_a_verify_of_no_drafts(rows):
    """`Simulated.plain` reports what `verify` with zero lengths does, whatever the truth."""
    from dsim.acceptance.sources import parse_acceptance
    from dsim.engine.backend import Simulated

    backend = Simulated(parse_acceptance("iid:0.5", 7))
    rng = np.random.default_rng(rows)
    idx = np.arange(rows)
    truth = rng.integers(0, 8, rows)
    emitted, accepted, stop = backend.verify(idx, np.zeros(rows, np.int64), truth)
    plain = backend.plain(idx, rng)
    assert plain[2] is stop is None
    assert plain[0].dtype == emitted.dtype and np.array_equal(plain[0], emitted)
    assert plain[1].dtype == accepted.dtype and np.array_equal(plain[1], accepted)


def test_backend_stop_flag_ends_a_request_early(tmp_path, flat):
    """A backend's end-of-sequence flag ends a request before its cap; counts stay exact."""
    from dsim.acceptance.sources import parse_acceptance
    from dsim.engine.backend import Simulated
    from dsim.run import run_engine
    from dsim.run_inputs import resolve_engine
    from dsim.workload import Workload

    class StopsRequestZeroInRoundTwo(Simulated):
        rounds = 0

        def verify(self, idx, lengths, truth):
            emitted, accepted, _ = super().verify(idx, lengths, truth)
            self.rounds += 1
            return emitted, accepted, (idx == 0) & (self.rounds == 2)

    workload = Workload(np.zeros(2), np.array([10, 10]), np.array([40, 40]), "test")
    backend = StopsRequestZeroInRoundTwo(parse_acceptance("iid:1.0", 3))
    spec = RunSpec(profile=flat, policy="fixed:3", gamma=3, draft_cost="0")
    req = run_engine(resolve_engine(spec), workload, backend).requests
    assert req["output_tokens"].tolist() == [1 + 2 * 4, 40]  # prefill token + two 4-token rounds
    assert req["rounds"].tolist() == [2, 10]
