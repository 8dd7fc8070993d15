"""The step-time model: closed forms on profiles linear in tokens, sequences and context, the
mixed-step composition, the drafter's passes, and how old profile formats are read."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import write_flat_profile, write_trace

from dsim.engine.config import DraftCost, drafter_kind
from dsim.errors import InputError
from dsim.hardware.latency import LatencyModel, StepRate, read_profile

# latency_ms = A + TOK * B + SEQ * R + KV * R * C (verify) and the P-prefixed prefill plane.
A, TOK, SEQ, KV = 4.0, 0.5, 0.25, 0.001
PA, PTOK, PSEQ, PKV = 3.0, 0.125, 0.5, 0.002


def linear_ms(b, r, c, prefill: bool = False):
    a, tok, seq, kv = (PA, PTOK, PSEQ, PKV) if prefill else (A, TOK, SEQ, KV)
    return a + tok * b + seq * r + kv * r * c


def write_linear_profile(path, prefill: bool = False):
    """Verify rows on R x q x C (R independent of B), plus prefill rows if asked."""
    rows = [
        ("verify", r * q, r, c, linear_ms(r * q, r, c))
        for r in (1, 2, 4, 8)
        for q in (1, 2, 4, 8)
        for c in (0, 2000)
    ]
    if prefill:
        rows += [
            ("prefill", r * k, r, c, linear_ms(r * k, r, c, prefill=True))
            for r in (1, 2, 4)
            for k in (16, 128)
            for c in (128, 4096)
        ]
    df = pd.DataFrame(
        rows, columns=["phase", "batch_tokens", "num_seqs", "context_len", "latency_ms"]
    )
    df.to_csv(path, index=False)
    return str(path)


@pytest.fixture
def linear(tmp_path):
    return write_linear_profile(tmp_path / "linear.csv")


def test_linear_profile_is_reproduced_off_grid(linear):
    model = LatencyModel.from_csv(linear)
    for b, r, c in [(5, 3, 500), (37, 8, 1999), (200, 30, 3000), (1, 1, 0)]:
        assert model.latency(b, r, c) == pytest.approx(linear_ms(b, r, c) / 1e3)
    report = model.fit_report()
    assert (
        report["verify"]["depends_on_num_seqs"] and report["verify"]["fit_worst_abs_error"] < 1e-9
    )
    assert "prefill priced" in model.describe()


def test_vector_path_equals_scalar_path(tmp_path):
    model = LatencyModel.from_csv(write_linear_profile(tmp_path / "p.csv", prefill=True))
    b = np.arange(6, 60)
    vec = model.step(b, 6, 700.0, 300, 2, 900.0)
    scalar = [model.step(int(x), 6, 700.0, 300, 2, 900.0) for x in b]
    np.testing.assert_allclose(vec, scalar, rtol=1e-12)
    np.testing.assert_allclose(
        model.latency(b, 6, 700.0), [model.latency(int(x), 6, 700.0) for x in b]
    )


def test_mixed_step_pays_the_fixed_cost_once(tmp_path):
    model = LatencyModel.from_csv(write_linear_profile(tmp_path / "p.csv", prefill=True))
    v, p = linear_ms(24, 6, 700) / 1e3, linear_ms(300, 2, 900, prefill=True) / 1e3
    assert model.latency(24, 6, 700) == pytest.approx(v)
    assert model.prefill(300, 2, 900) == pytest.approx(p)
    assert model.step(24, 6, 700, 300, 2, 900) == pytest.approx(v + p - min(A, PA) / 1e3)
    assert model.step(0, 0, 0.0, 300, 2, 900) == pytest.approx(p)  # prefill only
    assert model.step(24, 6, 700) == pytest.approx(v)  # verify only
    # an engine running prefill as its own pass (real mode) pays both passes in full
    assert model.step(24, 6, 700, 300, 2, 900, fused=False) == pytest.approx(v + p)
    assert model.priced(6, 700.0, 300, 2, 900.0, fused=False)(np.array([24, 30])) == (
        pytest.approx([v + p, linear_ms(30, 6, 700) / 1e3 + p])
    )


@pytest.mark.parametrize("fused", [True, False])
def test_span_is_the_call_over_consecutive_tokens(tmp_path, fused):
    """`span(start, stop)` (what the policies read for consecutive B) is bit for bit the
    callable at B = start..stop-1: inside and past the tabulated B, at a measured context,
    between the two and past the last, with and without prefill, and with the drafter's
    seconds added (`StepRate`)."""
    model = LatencyModel.from_csv(write_linear_profile(tmp_path / "p.csv", prefill=True))
    top = model.verify.f.shape[1]
    for ctx in (0.0, 700.0, 2000.0, 5000.0):
        for prefill in ((), (300, 2, 900.0)):
            price = model.priced(6, ctx, *prefill, fused=fused)
            rate = StepRate(price, 0.003)
            for start, stop in ((6, 6), (6, 60), (top - 5, top + 20)):
                b = np.arange(start, stop)
                assert np.array_equal(price.span(start, stop), price(b))
                assert np.array_equal(rate.span(start, stop), rate(b))
                assert len(rate.span(start, stop)) == stop - start


def test_unfused_engine_pays_both_passes_in_its_mixed_step(sim, tmp_path):
    """B arrives while A decodes: the step that prefills B also verifies A. Every step before
    it is decode-only (priced alike), so B's first token comes exactly the shared fixed cost
    min(A, PA) later when the engine runs prefill as its own pass."""
    profile = write_linear_profile(tmp_path / "p.csv", prefill=True)
    trace = write_trace(tmp_path / "t.jsonl", [0.0, 0.05], [100, 80], [41, 5])
    first = {
        fused: sim(
            trace=str(trace), profile=str(profile), acceptance="iid:1.0", policy="mtp1",
            draft_cost="0", fused_prefill=fused,
        ).requests["first_token_s"].to_numpy()
        for fused in (True, False)
    }  # fmt: skip
    assert first[False][0] == first[True][0]  # A's prefill step has no verify work
    assert first[False][1] - first[True][1] == pytest.approx(min(A, PA) / 1e3)


def test_profile_without_prefill_rows_prices_prefill_as_verify(linear):
    model = LatencyModel.from_csv(linear)
    assert model.prefill(300, 2, 900) == pytest.approx(linear_ms(300, 2, 900) / 1e3)


def test_three_column_profile_is_independent_of_sequences(tmp_path):
    model = LatencyModel.from_csv(write_flat_profile(tmp_path / "flat.csv", 5.0))
    assert model.latency(64, 1, 100) == model.latency(64, 60, 100) == pytest.approx(5e-3)
    assert "no num_seqs column" in model.describe()


def test_num_seqs_tied_to_batch_tokens_is_read_as_independent_of_sequences(tmp_path):
    path = tmp_path / "tied.csv"
    b = np.array([1, 4, 16, 64])
    pd.DataFrame(
        {"batch_tokens": b, "num_seqs": b // 4 + (b < 4), "context_len": 0, "latency_ms": 1 + b}
    ).to_csv(path, index=False)
    model = LatencyModel.from_csv(path)
    assert "tied" in model.describe()
    assert model.latency(16, 1, 0) == model.latency(16, 16, 0) == pytest.approx(17e-3)


@pytest.mark.parametrize(("policy", "k"), [("ar", 0), ("fixed:3", 3)])
def test_single_request_tpot_closed_form(sim, tmp_path, linear, policy, k):
    """One request, every draft accepted: round j verifies 1 + K tokens of one sequence at
    context P + 1 + j (K + 1); the prefill step is P tokens of one sequence ending at P."""
    prompt, out = 100, 41
    trace = write_trace(tmp_path / "t.jsonl", [0.0], [prompt], [out])
    res = sim(trace=str(trace), profile=linear, acceptance="iid:1.0", policy=policy, draft_cost="0")
    rounds = math.ceil((out - 1) / (k + 1))
    ctx = prompt + 1 + (k + 1) * np.arange(rounds)
    decode_s = linear_ms(1 + k, 1, ctx).sum() / 1e3
    assert res.summary["ttft_p50_s"] == pytest.approx(linear_ms(prompt, 1, prompt) / 1e3)
    assert res.summary["tpot_p50_s"] == pytest.approx(decode_s / (out - 1))


@pytest.mark.parametrize("prefill_rows", [False, True])
def test_multi_request_tpot_closed_form(sim, tmp_path, prefill_rows):
    """n requests at t = 0: one prefill step of n sequences, then n-sequence rounds; the step
    latency depends on R = n, not only on the batch tokens."""
    profile = write_linear_profile(tmp_path / "p.csv", prefill=prefill_rows)
    n, prompt, out, k = 6, 50, 21, 1
    trace = write_trace(tmp_path / "t.jsonl", [0.0] * n, [prompt] * n, [out] * n)
    res = sim(
        trace=str(trace), profile=profile, acceptance="iid:1.0", policy="mtp1", draft_cost="0"
    )
    rounds = math.ceil((out - 1) / (k + 1))
    ctx = prompt + 1 + (k + 1) * np.arange(rounds)
    decode_s = linear_ms(n * (1 + k), n, ctx).sum() / 1e3
    ttft = linear_ms(n * prompt, n, prompt, prefill=prefill_rows) / 1e3
    np.testing.assert_allclose(res.requests["first_token_s"], ttft)
    assert res.summary["tpot_p50_s"] == pytest.approx(decode_s / (out - 1))
    assert res.summary["tpot_p99_s"] == pytest.approx(decode_s / (out - 1))


def test_drafter_passes_by_kind(linear):
    target = LatencyModel.from_csv(linear)
    r, gamma, c = 4, 7, 1000.0
    one = 0.5 * target.latency(r, r, c)
    assert DraftCost(0.5, kind="block").seconds(r, gamma, c, target) == pytest.approx(
        0.5 * target.latency(r * gamma, r, c)
    )
    first = 0.5 * target.latency(r * (1 + gamma), r, c)  # over every verify position
    ar = DraftCost(0.5, kind="ar").seconds(r, gamma, c, target)
    assert ar == pytest.approx(first + (gamma - 1) * one)
    assert DraftCost(0.5, kind="mtp1").seconds(r, gamma, c, target) == pytest.approx(one)
    profiled = DraftCost(profile=target, kind="ar")  # a drafter profile prices a pass directly
    assert profiled.seconds(r, gamma, c, target) == pytest.approx(2 * first + (gamma - 1) * 2 * one)


def test_drafter_kind_of_each_policy():
    assert drafter_kind("mtp1") == "mtp1"
    assert drafter_kind("dspark") == drafter_kind("fixed:4") == "block"
    assert drafter_kind("dspark", "ar") == "ar" and drafter_kind("mtp1", "block") == "block"
    with pytest.raises(InputError, match="--drafter-kind"):
        drafter_kind("dspark", "eagle")


def test_mtp1_pays_one_pass_over_its_sequences(sim, tmp_path, linear):
    """mtp1 with ratio:0.5: each round adds half the target's step at R tokens, not R x gamma."""
    trace = write_trace(tmp_path / "t.jsonl", [0.0], [100], [21])
    res = sim(
        trace=str(trace),
        profile=linear,
        acceptance="iid:1.0",
        policy="mtp1",
        draft_cost="ratio:0.5",
    )
    ctx = 101 + 2 * np.arange(10)
    decode_s = (linear_ms(2, 1, ctx) + 0.5 * linear_ms(1, 1, ctx)).sum() / 1e3
    assert res.summary["tpot_p50_s"] == pytest.approx(decode_s / 20)
    assert res.summary["drafter_kind"] == "mtp1" and "num_seqs" in res.summary["step_model"]


def test_read_profile_adds_verify_phase(linear):
    assert set(read_profile(linear)["phase"]) == {"verify"}


def _graph_profile(path, keyed_by: str):
    """Verify rows at B = 1, 2, 4, 8, 16 (one sequence, one context), 1 ms + 0.5 ms per
    token, with a sidecar whose engine captures full decode graphs at 1, 2, 4, 8, 16."""
    b = np.array([1, 2, 4, 8, 16])
    df = pd.DataFrame(
        {"batch_tokens": b, "num_seqs": 1, "context_len": 512, "latency_ms": 1 + 0.5 * b}
    )
    df.to_csv(path, index=False)
    graphs = {"decode": "full", "keyed_by": keyed_by, "sizes": [1, 2, 4, 8, 16]}
    path.with_suffix(".json").write_text(json.dumps({"engine": {"graphs": graphs}}))
    return path


def test_a_verify_step_between_captured_sizes_pays_the_next_graph(tmp_path):
    """Full decode graphs keyed by tokens: B = 3 costs B = 4's step, 5-7 cost 8's, 9-16 cost
    16's (a staircase); past the largest size the surface runs on unpadded (linear). Without
    graphs, or with graphs keyed by requests, B = 3 is interpolated between 2 and 4."""
    model = LatencyModel.from_csv(_graph_profile(tmp_path / "p.csv", "tokens"))
    ms = [model.latency(b, 1, 512) * 1e3 for b in range(1, 21)]
    want = [1.5, 2.0, 3.0, 3.0, *[5.0] * 4, *[9.0] * 8, 9.5, 10.0, 10.5, 11.0]
    np.testing.assert_allclose(ms, want, rtol=1e-12)
    by_requests = LatencyModel.from_csv(_graph_profile(tmp_path / "r.csv", "requests"))
    assert by_requests.latency(3, 1, 512) * 1e3 == pytest.approx(2.5)
    bare = LatencyModel(read_profile(tmp_path / "p.csv"))
    assert bare.latency(3, 1, 512) * 1e3 == pytest.approx(2.5)
