"""The engine's speculative costs: the round cost (per round, per drafter pass) and the ragged
verify penalty, in the step the policies see and in the simulated step (docs/design.md, The
step-time model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli, write_flat_profile
from hypothesis import given
from hypothesis import strategies as st

from dsim.engine.config import DraftCost
from dsim.engine.replica import ragged
from dsim.errors import InputError
from dsim.hardware import round_fit
from dsim.hardware.engines import get_engine
from dsim.hardware.gpu_model import SpecRound
from dsim.hardware.latency import LatencyModel, StepRate, spec_costs
from dsim.policies.check import check_property
from dsim.policies.registry import parse_policy
from dsim.policies.schedule import dspark_lengths
from dsim.run import simulate
from dsim.run_inputs import resolve_engine
from dsim.run_spec import RunSpec

TRACE = "synthetic:rate=40,n=40,prompt=200,output=120"
ALTERNATING = """
import numpy as np
class Alternating:
    drafts = True
    synchronous = False
    def __init__(self, sla_tps=None):
        pass
    def lengths(self, conf, sps, truth):
        return np.arange(conf.shape[0]) % 2
"""


def profile(tmp_path, per_round=0.0, host_pass=0.0, penalty=0.0, name="flat"):
    """A flat 10 ms profile whose sidecar carries an engine's speculative terms."""
    path = write_flat_profile(tmp_path / f"{name}.csv", 10.0)
    engine = {
        "name": "test",
        "spec_round": {"terms_s": {"per_round_s": per_round, "host_pass_s": host_pass}},
        "ragged": {"penalty": penalty},
    }
    path.with_suffix(".json").write_text(json.dumps({"estimate": True, "engine": engine}))
    return str(path)


def run(prof, **kw):
    base = dict(trace=TRACE, profile=prof, acceptance="iid:0.7", draft_cost="0", sched_cost="0")
    return simulate(RunSpec(**{**base, **kw}))


def decode_only(steps):
    return (steps.prefill_tokens == 0) & (steps.num_running > 0)


# -- the round cost --------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "passes"), [("ar", 3), ("block", 1), ("mtp1", 1)])
def test_draft_cost_is_per_round_plus_each_pass_at_least_its_host_time(kind, passes):
    """Closed form: per_round + passes x max(ratio x the target's pass, host per step)."""
    latency = LatencyModel(pd.DataFrame({"batch_tokens": [1, 64], "context_len": 0,
                                         "latency_ms": [10.0, 10.0]}))  # fmt: skip
    host_bound = SpecRound(0.002, 0.0015)  # the pass's work (1 ms) is shorter than the host's
    cost = DraftCost(ratio=0.1, kind=kind, spec_round=host_bound)
    assert cost.seconds(4, 3, 0.0, latency) == pytest.approx(0.002 + passes * 0.0015)
    gpu_bound = SpecRound(0.002, 0.0005)
    cost = DraftCost(ratio=0.1, kind=kind, spec_round=gpu_bound)
    assert cost.seconds(4, 3, 0.0, latency) == pytest.approx(0.002 + passes * 0.001)
    free = DraftCost(ratio=0.0, kind=kind, spec_round=gpu_bound)
    assert free.seconds(4, 3, 0.0, latency) == pytest.approx(0.002 + 0.0005 * passes)


@given(st.floats(0, 0.05), st.floats(0, 0.05), st.floats(0, 1))
def test_a_pass_costs_the_longer_of_its_work_and_the_host_time(work, host, ratio):
    terms = SpecRound(0.0, host)
    assert terms.pass_seconds(work) == max(work, host)
    many = terms.pass_seconds(np.array([work, ratio * work]))
    np.testing.assert_array_equal(many, np.maximum([work, ratio * work], host))


@pytest.mark.parametrize(("kind", "expected_ms"), [("ar", 15.0), ("block", 13.0)])
def test_every_drafting_decode_step_pays_the_round_cost(tmp_path, kind, expected_ms):
    """Flat 10 ms step, 2 ms a round, a pass at least 1 ms of host time: gamma 3 ar passes
    15 ms, one block pass 13 ms; `ar` (no drafter) pays nothing."""
    prof = profile(tmp_path, per_round=0.002, host_pass=0.001)
    steps = run(prof, policy="fixed:3", gamma=3, drafter_kind=kind).steps
    np.testing.assert_allclose(steps.latency_s[decode_only(steps)], expected_ms / 1e3)
    plain = run(prof, policy="ar").steps
    np.testing.assert_allclose(plain.latency_s[decode_only(plain)], 0.010)


@pytest.mark.parametrize(("kind", "same_as_gamma_k"), [("ar", True), ("block", False)])
def test_a_fixed_length_proposes_its_k_drafts_with_an_autoregressive_drafter(
    tmp_path, kind, same_as_gamma_k
):
    """An engine serving `fixed:3` is set to 3 speculative tokens: with an autoregressive
    drafter, --gamma 7 runs as --gamma 3 (3 passes a round, bit for bit the same run), where it
    used to pay 7 passes for 3 verified drafts. A block drafter's one pass covers its block:
    gamma still sets it."""
    prof = profile(tmp_path, per_round=0.002, host_pass=0.001)
    wide = run(prof, policy="fixed:3", gamma=7, drafter_kind=kind).steps
    narrow = run(prof, policy="fixed:3", gamma=3, drafter_kind=kind).steps
    same = wide.latency_s.shape == narrow.latency_s.shape and bool(
        np.array_equal(wide.latency_s, narrow.latency_s)
    )
    assert same == same_as_gamma_k
    if kind == "ar":
        np.testing.assert_allclose(wide.latency_s[decode_only(wide)], 0.015)
    base = dict(trace=TRACE, profile=prof, acceptance="iid:0.7", draft_cost="0", sched_cost="0")
    spec = RunSpec(**base, policy="fixed:3", gamma=7, drafter_kind=kind)
    said = [w for w in resolve_engine(spec).warnings if w.startswith("--gamma 7 has no effect")]
    assert said == (["--gamma 7 has no effect on fixed:3 with an autoregressive drafter: it "
                     "drafts 3 a round, as an engine set to 3 speculative tokens does"]
                    if same_as_gamma_k else [])  # fmt: skip


def test_the_policies_see_the_round_cost_in_sps(tmp_path):
    """SPS(B) = 1 / (drafter + machinery + step): the engine hands the cost to the policy."""
    prof = profile(tmp_path, per_round=0.004, host_pass=0.0)
    seen = []

    class Spy:
        drafts, synchronous = True, False

        def lengths(self, conf, sps, truth):
            seen.append(float(sps(conf.shape[0])))
            return np.zeros(conf.shape[0], np.int64)

    from dsim.run_inputs import resolve

    inputs = resolve(RunSpec(trace=TRACE, profile=prof, acceptance="iid:0.7", draft_cost="0"))
    price = inputs.engine.profile.latency.priced(3, 100.0)
    draft = inputs.engine.draft_cost.seconds(3, 7, 100.0, price)
    assert draft == pytest.approx(0.004)
    assert float(StepRate(price, draft)(3)) == pytest.approx(1 / 0.014)
    assert Spy().lengths(np.zeros((3, 7)), StepRate(price, draft), None).sum() == 0
    assert seen == [pytest.approx(1 / 0.014)]


def test_old_sidecars_price_nothing(tmp_path):
    """A profile without a sidecar, or one without the new entries, runs as before."""
    bare = write_flat_profile(tmp_path / "bare.csv", 10.0)
    assert spec_costs(bare) == (SpecRound(), 0.0)
    bare.with_suffix(".json").write_text(json.dumps({"estimate": True, "engine": {"name": "x"}}))
    assert spec_costs(bare) == (SpecRound(), 0.0)
    zeros = {"name": "x", "spec_round": {"terms_s": {"per_round_s": 0.0, "per_pass_s": 0.0}}}
    bare.with_suffix(".json").write_text(json.dumps({"estimate": True, "engine": zeros}))
    assert spec_costs(bare) == (SpecRound(), 0.0)  # an older estimate that priced nothing
    a = run(str(bare), policy="dspark")
    b = run(profile(tmp_path, name="zeros"), policy="dspark")
    assert a.requests.equals(b.requests)


def test_an_older_estimate_with_a_per_pass_constant_is_refused(tmp_path, monkeypatch, capsys):
    old = write_flat_profile(tmp_path / "old.csv", 10.0)
    terms = {"per_round_s": 0.0, "per_pass_s": 0.00148}
    sidecar = {"estimate": True, "engine": {"name": "x", "spec_round": {"terms_s": terms}}}
    old.with_suffix(".json").write_text(json.dumps(sidecar))
    with pytest.raises(InputError, match="regenerate the estimate"):
        spec_costs(old)
    code, _, err = run_cli(monkeypatch, capsys, "run", "--trace", TRACE, "--profile", str(old),
                           "--out", str(tmp_path / "run"), "--no-progress")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_presets_round_terms_by_version():
    """Each version's terms are >= 0 and name their source; current vLLM takes vLLM 0.8's
    per_round and its own host time per proposer step (addendum 5), below vLLM 0.8's;
    TensorRT-LLM borrows SGLang's; the 2023 preset and GPU-only have none."""
    sglang, vllm08 = get_engine("sglang"), get_engine("vllm-0.8")
    for engine in (sglang, vllm08):
        assert engine.spec_round.per_round_s >= 0 and engine.spec_round.host_pass_s > 0
    current = get_engine("vllm")
    assert current.spec_round.per_round_s == vllm08.spec_round.per_round_s
    assert 0 < current.spec_round.host_pass_s < vllm08.spec_round.host_pass_s
    assert "addendum 5" in current.spec_round_source
    trtllm = get_engine("trtllm")
    assert trtllm.spec_round == sglang.spec_round and "borrowed" in trtllm.spec_round_source
    for name in ("vllm-2023", "gpu-only"):
        engine = get_engine(name)
        assert engine.spec_round == SpecRound() and engine.ragged.penalty == 0.0
    scaled = get_engine("vllm").record(0.5)
    assert scaled["spec_round"]["terms_s"]["host_pass_s"] == pytest.approx(
        0.5 * current.spec_round.host_pass_s
    )


def test_the_round_fit_reads_the_rules():
    """The tree row: 64 verify tokens, 8 passes of 8 tokens; chains: 1 + K verify tokens, K
    passes, the first over all of them; ratio rows' round is AL / speed-up plain steps, E126's
    its TPOT; leave one source out covers every row."""
    table = round_fit.round_table().set_index("name")
    tree = ["verify_per_seq", "passes", "first_per_seq", "rest_per_seq"]
    assert table.loc["P18", tree].tolist() == [64, 8, 8, 8]
    assert table.loc["P19", tree].tolist() == [4, 3, 4, 1]
    assert table.loc["E126", tree].tolist() == [4, 3, 4, 1]
    ratio = table.drop(index="E126")
    np.testing.assert_allclose(
        ratio["measured_round_s"], ratio["accept_len"] / ratio["speedup"] * ratio["plain_s"]
    )
    assert table.loc["E126", "measured_round_s"] == pytest.approx(0.01247)
    loo = round_fit.leave_one_out()["rows"]
    assert sorted(r["row"] for r in loo) == sorted(table.index)


def test_a_chain_is_a_tree_of_top_k_1():
    """SGLang's (steps, top-k, draft tokens) read as passes and tokens; a chain of K is its
    top-k 1 case: verify 1 + K per request, K passes, the first over 1 + K, the rest over 1."""
    args = ("x", "s", "sglang", "docs", "eagle3", 2, 500.0)
    shape = ["verify_per_seq", "passes", "first_per_seq", "rest_per_seq"]
    for k in (1, 3, 7):
        row = round_fit.tree(*args, *round_fit.chain_of(k), 2.0, 1.5)
        assert [getattr(row, f) for f in shape] == [1 + k, k, 1 + k, 1]
    row = round_fit.tree(*args, 7, 10, 64, 3.0, 0.9)
    assert [getattr(row, f) for f in shape] == [64, 7, 8, 10]


def test_the_qwen3_eagle_rows_read_as_addendum_8_states():
    """Each EAGLE-3 row against its own source's plain row at its batch; batches above 8
    only outside the fit."""
    every = {r.name: r for r in round_fit.eagle_rows()}
    fitted = {r.name for r in round_fit.spec_rows() if r.name in every}
    assert len(every) == 16 and fitted == set(every) - {"E159", "E160"}
    e169, e174 = every["E169"], every["E174"]  # (3, 3, 4) at batch 1; (3, 3, 8) at batch 4
    assert (e169.verify_per_seq, e169.passes, e169.first_per_seq, e169.rest_per_seq) == (4, 3, 4, 3)
    assert e169.speedup == pytest.approx(207.62 / 222.47)
    assert (e174.seqs, e174.setup) == (4, "qwen3moe-tp2")
    assert e174.speedup == pytest.approx(426.46 / 566.21)
    assert every["E157"].speedup == pytest.approx(476.37 / 507.49)


def test_rows_not_fitted_do_not_move_the_terms_and_vllm_keeps_its_own_per_round():
    """P19-P20 (exclusion 2) change no term whatever they measured; vLLM 0.8's per_round is its
    own whatever SGLang's rows say (docs/engine-v2-rules.md, addendum 9)."""
    table = round_fit.round_table()
    shipped = round_fit.spec_rounds()
    moved = table.copy()
    mtp = moved["name"].isin(["P19", "P20"])
    assert not moved.loc[mtp, "fitted"].any()
    moved.loc[mtp, "measured_round_s"] *= 3.0
    assert round_fit._fit_all(moved) == shipped
    sglang = (moved["version"] == "sglang") & moved["fitted"]
    moved.loc[sglang, "measured_round_s"] *= 1.5
    refit = round_fit._fit_all(moved)
    assert refit["sglang"] != shipped["sglang"]
    assert refit["vllm-0.8"] == shipped["vllm-0.8"]
    assert refit["vllm-0.8"].per_round_s == round_fit.VLLM_PER_ROUND_S


def test_the_round_fit_recovers_terms_that_made_the_rounds():
    """Rounds made by known terms give them back (exact data, the grid's step)."""
    table = round_fit.round_table()
    sglang = table[table["version"] == "sglang"].copy()
    true = SpecRound(0.0006, 0.00095)
    sglang["measured_round_s"] = round_fit.predict_round(sglang, true)
    got = round_fit.fit_terms(sglang)
    assert got.host_pass_s == pytest.approx(true.host_pass_s, abs=1e-9)
    assert got.per_round_s == pytest.approx(true.per_round_s, abs=1e-9)


# -- the ragged penalty ----------------------------------------------------------------------
def test_ragged_rule_uniform_ragged_and_capped_rows():
    left = np.array([50, 50, 50])
    assert not ragged(np.array([3, 3, 3]), left)
    assert ragged(np.array([3, 1, 3]), left)
    assert ragged(np.array([0, 2, 0]), left)
    assert not ragged(np.array([3, 3, 1]), np.array([50, 50, 2]))  # the last at its cap
    assert not ragged(np.array([3, 3, 7]), np.array([50, 50, 4]))  # the last beyond it
    assert not ragged(np.array([5]), np.array([50]))
    assert not ragged(np.array([1, 4]), np.array([2, 3]))  # every row at its cap


def test_step_price_with_the_penalty_closed_form():
    model = LatencyModel(
        pd.DataFrame(
            {
                "batch_tokens": [1, 100],
                "num_seqs": [1, 1],
                "context_len": 0,
                "latency_ms": [10.0, 20.0],
            }  # fmt: skip
        )
    )
    price = model.priced(1, 0.0)
    b = 12
    assert price.ragged(b, 0.5) == pytest.approx(1.5 * price(b))
    rate = StepRate(price, 0.003, 0.5)
    assert rate(b) == pytest.approx(1 / (0.003 + 1.5 * price(b)))
    assert rate.uniform(b) == pytest.approx(1 / (0.003 + price(b)))
    np.testing.assert_allclose(rate.span(5, 9), 1 / (0.003 + 1.5 * price(np.arange(5, 9))))
    unfused = model.priced(1, 0.0, 64, 1, 64.0, fused=False)
    assert unfused.ragged(b, 0.5) == pytest.approx(1.5 * price(b) + model.prefill(64, 1, 64.0))


def test_ragged_decode_steps_pay_and_fused_prefill_steps_do_not(tmp_path):
    """Flat 10 ms, penalty 0.5: a decode-only step whose lengths differ costs 15 ms; a fused
    step with prefill costs what it did; uniform lengths never pay."""
    plugin = tmp_path / "alt.py"
    plugin.write_text(ALTERNATING)
    prof = profile(tmp_path, penalty=0.5)
    result = run(prof, policy=f"{plugin}:Alternating", gamma=3)
    steps = result.steps
    dec = decode_only(steps)
    paid = np.isclose(steps.latency_s, 0.015)
    said = result.summary["engine_round"]  # what the run table prints
    assert said["ragged_penalty"] == 0.5 and said["ragged_steps"] == int(paid.sum()) > 0
    assert np.isclose(steps.latency_s[dec & ~paid], 0.010).all()
    assert (steps.num_running[paid] >= 2).all()
    many = dec & (steps.num_running >= 2)
    assert paid[many].mean() > 0.9  # all but rounds with rows at their cap
    assert np.isclose(steps.latency_s[steps.prefill_tokens > 0], 0.010).all()
    uniform = run(prof, policy="fixed:1", gamma=3).steps
    assert np.isclose(uniform.latency_s[decode_only(uniform)], 0.010).all()


def test_an_unfused_step_with_prefill_pays_on_its_verify_pass(tmp_path):
    plugin = tmp_path / "alt.py"
    plugin.write_text(ALTERNATING)
    prof = profile(tmp_path, penalty=0.5)
    steps = run(prof, policy=f"{plugin}:Alternating", gamma=3, fused_prefill=False).steps
    mixed = (steps.prefill_tokens > 0) & (steps.num_running >= 2)
    assert mixed.any() and np.isclose(steps.latency_s[mixed], 0.025).mean() > 0.9


def test_the_option_overrides_the_sidecar(tmp_path):
    plugin = tmp_path / "alt.py"
    plugin.write_text(ALTERNATING)
    prof = profile(tmp_path, penalty=0.5)
    steps = run(prof, policy=f"{plugin}:Alternating", gamma=3, ragged_penalty=0.0).steps
    assert np.isclose(steps.latency_s[decode_only(steps)], 0.010).all()


class Penalised:
    """An SPS (table or function of B) under a ragged penalty, as the engine hands it over
    (`StepRate`)."""

    def __init__(self, sps, penalty):
        table = np.asarray(sps, np.float64) if not callable(sps) else None
        self.base = sps if table is None else (lambda b: table[np.asarray(b)])
        self.ragged_penalty = penalty

    def uniform(self, b):
        return np.asarray(self.base(b), np.float64)

    def __call__(self, b):
        return 1.0 / ((1.0 + self.ragged_penalty) / self.uniform(b))

    def span(self, start, stop):
        return self(np.arange(start, stop))


def test_dspark_goes_uniform_when_the_penalty_is_large():
    """The same confidences: ragged lengths without a penalty, uniform ones under a large one
    (the forecast from first drafts prefers whole levels), and not all zero."""
    rng = np.random.default_rng(5)
    conf = np.concatenate([rng.uniform(0.9, 0.99, (4, 6)), rng.uniform(0.2, 0.5, (4, 6))])
    table = 1.0 / (0.010 + 0.00002 * np.arange(200))  # memory-bound: B is nearly free
    free = dspark_lengths(conf, Penalised(table, 0.0))
    assert len(set(free.tolist())) > 1
    heavy = dspark_lengths(conf, Penalised(table, 3.0))
    assert len(set(heavy.tolist())) == 1 and heavy[0] > 0


def test_dspark_in_the_engine_goes_uniform_under_a_large_penalty(tmp_path):
    """Through the engine, on a profile where each verify token costs 0.3 ms over 10 ms: with
    penalty 5 dspark's decode steps stop paying it (uniform lengths, every step at the
    profile's price); with 0 the same run's lengths are mostly ragged."""
    prof = profile(tmp_path, penalty=5.0)
    b = np.array([1, 8, 64, 512, 4096])
    pd.DataFrame({"batch_tokens": b, "context_len": 0, "latency_ms": 10 + 0.3 * (b - 1)}).to_csv(
        prof, index=False
    )
    heavy = run(prof, policy="dspark", acceptance="preset:dspark:chat").steps
    dec = decode_only(heavy) & (heavy.num_running >= 2)
    priced = (10 + 0.3 * (heavy.batch_tokens[dec] - 1)) / 1e3
    assert np.isclose(heavy.latency_s[dec], priced).mean() > 0.95
    assert ((heavy.batch_tokens[dec] % heavy.num_running[dec]) == 0).mean() > 0.95
    free = run(prof, policy="dspark", acceptance="preset:dspark:chat", ragged_penalty=0.0).steps
    dec0 = decode_only(free) & (free.num_running >= 2)
    assert ((free.batch_tokens[dec0] % free.num_running[dec0]) != 0).mean() > 0.5


@pytest.mark.parametrize("penalty", [0.01, 0.7])  # about half, and nearly all, rounds uniform
@pytest.mark.parametrize("spec", ["dspark", "dspark-async", "goodput", "threshold:0.5"])
def test_lossless_under_a_penalty(spec, penalty):
    """The losslessness property (dsim/policies/check.py) with every SPS penalised."""

    def make(sla_tps):
        class Wrapped:  # holds its policy, so the checker's deep copy copies its state
            drafts, synchronous = True, True

            def __init__(self):
                self.inner = parse_policy(spec, sla_tps)
                if hasattr(self.inner, "observe"):
                    self.observe = lambda lengths, accepted: self.inner.observe(lengths, accepted)

            def lengths(self, conf, sps, truth):
                return self.inner.lengths(conf, Penalised(sps, penalty), truth)

        return Wrapped()

    runs, found = check_property(make, trials=6)
    assert found is None and runs > 0


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["-0.1", "11", "nan"])
def test_a_penalty_out_of_range_is_one_line(monkeypatch, capsys, tmp_path, bad):
    out = tmp_path / "o"
    code, _, err = run_cli(
        monkeypatch, capsys, "run", "--trace", "synthetic:n=5", "--ragged-penalty", bad,
        "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "ragged-penalty" in err and not out.exists()


def test_a_bad_sidecar_penalty_is_one_line(monkeypatch, capsys, tmp_path):
    prof = profile(tmp_path, penalty=-1)
    with pytest.raises(InputError, match="ragged penalty"):
        spec_costs(prof)
    code, _, err = run_cli(
        monkeypatch, capsys, "run", "--trace", "synthetic:n=5", "--profile", prof, "--no-progress"
    )
    assert code == 2 and err.count("\n") == 1 and "flat.json" in err


def test_the_penalty_is_part_of_a_sweep_key(tmp_path):
    from dsim.pareto.sweep import point_key

    prof = profile(tmp_path, penalty=0.5)
    keys = {point_key(RunSpec(trace=TRACE, profile=prof, ragged_penalty=p)) for p in (None, 0, 2)}
    assert len(keys) == 3


EAGLE = "profiles/h200-qwen3-8b-eagle-roofline.csv"  # its sidecar: drafter_kind ar, qwen3-8b


@pytest.mark.parametrize(
    ("policy", "kind"), [("fixed:3", "ar"), ("dspark", "ar"), ("mtp1", "mtp1")]
)
def test_auto_takes_the_drafter_kind_its_profile_names(policy, kind):
    """An EAGLE estimate drafts autoregressively: `auto` runs it as `ar` (as plan and sweeps
    do), never as a block whose one pass would price K drafts as one; `mtp1` keeps its head."""
    base = dict(trace=TRACE, profile="profiles/h200-qwen3-8b-roofline.csv", acceptance="iid:0.7",
                draft_cost=EAGLE, policy=policy, gamma=3)  # fmt: skip
    assert resolve_engine(RunSpec(**base)).draft_cost.kind == kind
    auto = simulate(RunSpec(**base)).steps.latency_s
    named = simulate(RunSpec(**base, drafter_kind=kind)).steps.latency_s
    assert np.array_equal(auto, named)


def test_a_drafter_profile_priced_beside_another_target_is_one_line(monkeypatch, capsys, tmp_path):
    out = tmp_path / "o"
    args = ["run", "--trace", TRACE, "--profile", "profiles/h200x8-deepseek-v3-fp8-roofline.csv",
            "--draft-cost", EAGLE, "--out", str(out), "--no-progress"]  # fmt: skip
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1 and not out.exists()
    assert "they differ in model, tp" in err and "--draft-cost ratio:X" in err


@pytest.mark.parametrize("kind", ["xyz", None])
def test_a_drafter_kind_its_sidecar_does_not_know_names_the_sidecar(
    monkeypatch, capsys, tmp_path, kind
):
    """The kind is the sidecar's, not --drafter-kind's (which the command line never gave)."""
    drafter = tmp_path / "d.csv"
    drafter.write_bytes(Path(EAGLE).read_bytes())
    side = json.loads(Path(EAGLE).with_suffix(".json").read_text())
    drafter.with_suffix(".json").write_text(json.dumps({**side, "drafter_kind": kind}))
    out = tmp_path / "o"
    args = ["run", "--trace", TRACE, "--profile", "profiles/h200-qwen3-8b-roofline.csv",
            "--draft-cost", str(drafter), "--out", str(out), "--no-progress"]  # fmt: skip
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1 and not out.exists(), err
    assert "d.json: drafter_kind must be one of" in err and "--drafter-kind" not in err


@pytest.mark.parametrize(("policy", "warned"), [("vllm-adaptive", True), ("dspark", False)])
def test_sched_cost_on_a_policy_that_does_not_pay_it_is_said(policy, warned):
    """A policy that schedules off the round's critical path never pays --sched-cost: a
    value given for it changes nothing, and the run says so."""
    base = dict(trace=TRACE, profile="profiles/h200-qwen3-8b-roofline.csv", acceptance="iid:0.7",
                policy=policy, sched_cost="0.0005")  # fmt: skip
    said = [w for w in resolve_engine(RunSpec(**base)).warnings if "--sched-cost" in w]
    assert bool(said) == warned
