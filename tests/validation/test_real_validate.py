"""`dsim validate`: the prompt split, the rate rule, the figures and the end-to-end
run on the tiny target (real runs, trace and preset simulations at two loads)."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, run_cli, write_flat_profile
from samples import untrained_drafter

from dsim.acceptance.sources import parse_acceptance
from dsim.acceptance.trace import read_acceptance_trace, write_acceptance_trace
from dsim.engine.backend import Simulated
from dsim.errors import InputError
from dsim.hardware.latency import LatencyModel, profile_metadata, read_profile, write_profile
from dsim.models.checkpoint import save_drafter
from dsim.models.collect import collect
from dsim.models.data import Prompt, read_prompt_file
from dsim.models.target import tiny_target
from dsim.run import RunSpec, run_engine
from dsim.run_inputs import resolve, resolve_engine
from dsim.validation import study
from dsim.validation.bench import Bench
from dsim.validation.drift import DRIFT_TOL, RERUNS_TOTAL, RunDrift, TripleDrift, verdict
from dsim.validation.figures import (
    METRICS,
    attribution,
    comparisons,
    ranking,
    ranking_gaps,
    ratios,
    validation_json,
)
from dsim.validation.plan import (
    Repeats,
    choose_rate,
    expected_workload,
    rate_for_load,
    repeat_order,
    run_busy_s,
    simulated_busy,
    split_rows,
    trace_half,
)
from dsim.validation.reference import Reference, Samples, SpeedTrace, run_factor
from dsim.validation.report import _drift as report_drift
from dsim.validation.runs import KeptRun, draw_seed, run_name, simulate_draws
from dsim.validation.settings import Settings
from dsim.validation.step_check import EngineCalibration, PassClocks
from dsim.validation.study import sized_runs, validate
from dsim.validation.timeline import (
    CALIBRATE_SHARE,
    MIN_REQUESTS_SHARE,
    RATE_RULE_SHARE,
    RUN_SHARE,
    Timeline,
)
from dsim.workload import Workload


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A tiny drafter checkpoint, 6 prompts and a trace collected on all of them."""
    folder = tmp_path_factory.mktemp("validate")
    target = tiny_target()
    drafter = untrained_drafter(target)
    ckpt = folder / "drafter.pt"
    save_drafter(ckpt, drafter, target.fingerprint, {})
    prompts = folder / "prompts.jsonl"
    rows = [{"id": f"p{i}", "domain": "chat", "prompt": f"question {i}?"} for i in range(6)]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    df, _ = collect(target, drafter, read_prompt_file(prompts), 12, 3, seed=0)
    trace = folder / "trace.parquet"
    meta = {"target": target.fingerprint, "drafter": "x", "dataset": str(prompts)}
    write_acceptance_trace(df, trace, {**meta, "temperature": 1.0, "command": "test"})
    return ckpt, prompts, trace


@pytest.mark.parametrize("n", [2, 7, 72])
def test_split_is_disjoint_and_covers_the_file(n):
    trace, served = split_rows(n)
    assert set(trace).isdisjoint(served) and sorted([*trace, *served]) == list(range(n))
    assert (trace % 2 == 0).all() and (served % 2 == 1).all() and len(served) == n // 2


def test_trace_half_keeps_only_even_rows_and_refuses_the_wrong_trace(inputs, tmp_path):
    _, prompts, trace = inputs
    half, _ = trace_half(trace, prompts, 6)
    full, meta = read_acceptance_trace(trace)
    assert set(half["seq_id"]) == {0, 2, 4}
    assert len(half) == int(full["seq_id"].isin([0, 2, 4]).sum())
    odd = tmp_path / "odd.parquet"
    write_acceptance_trace(full[full["seq_id"] % 2 == 1], odd, meta)
    with pytest.raises(InputError, match="no rows on the trace half"):
        trace_half(odd, prompts, 6)
    served, _ = trace_half(trace, prompts, 6, served=True)  # the read-backs' other half
    assert set(served["seq_id"]) == {1, 3, 5}
    assert len(served) + len(half) == len(full)
    even = tmp_path / "even.parquet"
    write_acceptance_trace(full[full["seq_id"] % 2 == 0], even, meta)
    with pytest.raises(InputError, match="no rows on the served half"):
        trace_half(even, prompts, 6, served=True)
    other = tmp_path / "other.jsonl"
    other.write_text(prompts.read_text())
    with pytest.raises(InputError, match="cannot be split"):
        trace_half(trace, other, 6)


def test_choose_rate_inverts_a_known_busy_curve():
    """busy(rate) = rate / (rate + 2) (an M/M/1-like curve): busy b at rate 2b / (1 - b)."""
    for b in (1 / 3, 2 / 3):
        assert choose_rate(b, lambda x: x / (x + 2)) == pytest.approx(2 * b / (1 - b), rel=1e-6)


@pytest.mark.parametrize(
    ("longest", "given", "contexts"),
    [
        (300, None, (128, 256, 512)),
        (512, None, (128, 256, 512)),
        (513, None, (128, 512, 640)),
        (1398, None, (128, 512, 1408)),
        (1398, (16, 32), (16, 32)),
    ],
)
def test_profile_contexts_reach_the_longest_served_request(longest, given, contexts):
    """The on-machine profile spans every context the runs reach (the model interpolates, never
    extrapolates past its last context), unless contexts are given."""
    grid = Settings(profile_contexts=given).profile_grid(longest, 8)
    assert tuple(grid.contexts) == contexts
    assert max(grid.contexts) >= longest or given


def test_profile_grid_measures_where_the_runs_live():
    """Every (R, q) cell with R <= 4 and q up to the verify block is a measured point (the
    runs' R ~ 1-3; the CPU pass is not monotone in B there), and so is every B up to two
    blocks, once each, after the cross product; R stays capped by --max-seqs."""
    grid = Settings().profile_grid(300, 8)
    cells = {(b // r, r) for c, b, r in grid.points() if c == 512}
    assert {(q, r) for r in range(1, 5) for q in range(1, 9)} <= cells
    assert (8, 16) in cells and (3, 16) not in cells  # R = 16 only at the cross product's q
    points = grid.points()
    assert len(points) == len(set(points)) == 3 * (4 * 4 + 4 * 8 - 3 * 4 + 2)  # + B 11, 13
    assert {b for c, b, _ in points if c == 512} >= set(range(1, 17))
    assert (512, 13, 1) in points and (512, 11, 1) in points
    assert points[:4] == [(128, q, 1) for q in (1, 2, 4, 8)]
    small = Settings(max_seqs=3).profile_grid(300, 6)
    assert max(r for *_, r in small.points()) == 3
    assert {b for c, b, _ in small.points() if c == 512} >= set(range(1, 13))
    assert max(b for _, b, r in small.points() if r == 1) == 11  # 11: no cell of R <= 3, q <= 6
    assert max(q for r, q in small.cells if r > 1) == 6


@pytest.mark.parametrize(("served", "n"), [(36, 12), (3, 4), (5, 2)])
def test_repeats_walk_through_the_served_prompts(served, n):
    """Repeat k asks served prompt (k n + i) mod P for request i, so consecutive repeats serve
    consecutive prompts: P / n repeats of n requests serve every prompt once; the rate rule's
    prompt lengths follow the same order."""
    lengths = np.arange(served) * 10
    asked = []
    for k in range(3):
        order = repeat_order(served, k, n)
        assert sorted(order.tolist()) == list(range(served))
        asked += [int(order[i % served]) for i in range(n)]
        work = expected_workload(1.0, n, k, lengths[order], np.ones(1, np.int64))
        assert [x // 10 for x in work.prompt_tokens] == asked[-n:]
    assert asked == [j % served for j in range(3 * n)]


def test_rate_rule_hits_the_busy_fraction_in_the_simulator(inputs, tmp_path):
    _, prompts, trace = inputs
    half, _ = trace_half(trace, prompts, 6)
    profile = write_flat_profile(tmp_path / "profile.csv", 5.0)
    base = RunSpec(trace="x", profile=str(profile), gamma=4, draft_cost="0")
    half_file = tmp_path / "half.parquet"
    _, meta = read_acceptance_trace(trace)
    write_acceptance_trace(half, half_file, meta)
    lengths, outputs = np.array([20, 30, 25]), np.array([8, 12, 5, 12])
    repeats = Repeats((0, 1, 2), 40, lengths, outputs)
    for busy in (1 / 3, 2 / 3):
        rate, sim = rate_for_load(busy, base, str(half_file), repeats)
        again = [
            simulated_busy(
                replace(base, policy="mtp1", seed=s),
                expected_workload(rate, 40, s, lengths[repeat_order(3, k, 40)], outputs),
                str(half_file),
            )
            for k, s in enumerate((0, 1, 2))
        ]
        assert np.mean([b for b, _ in again]) == pytest.approx(sim) and abs(sim - busy) < 0.03
        # mtp1 alone: the mean busy seconds of the same three simulations
        one = run_busy_s(base, ("mtp1",), str(half_file), repeats, rate)
        assert one == pytest.approx(np.mean([s for _, s in again]))
    slow, fast = (run_busy_s(base, ("mtp1",), str(half_file), repeats, r) for r in (0.05, 5.0))
    assert slow > fast  # fewer requests batched together at the lower rate: more steps


def test_a_simulated_run_is_busy_its_fraction_of_its_duration(inputs, tmp_path):
    """simulated_busy's seconds are its busy fraction of the run's simulated duration, and on
    a flat profile every step costs its 5 ms, so the busy seconds are whole steps."""
    _, prompts, trace = inputs
    profile = write_flat_profile(tmp_path / "profile.csv", 5.0)
    spec = RunSpec(trace="x", profile=str(profile), gamma=4, draft_cost="0", policy="mtp1")
    work = expected_workload(0.5, 6, 0, np.array([20, 30, 25]), np.array([8, 12]))
    source = parse_acceptance(str(trace), spec.gamma, "raw")
    result = run_engine(resolve_engine(spec), work, Simulated(source))
    busy, busy_s = simulated_busy(spec, work, str(trace))
    assert busy == pytest.approx(result.summary["busy_fraction"])
    assert busy_s == pytest.approx(busy * result.summary["duration_s"])
    assert busy_s / 0.005 == pytest.approx(round(busy_s / 0.005), abs=1e-6)


def frame_of(values: dict) -> pd.DataFrame:
    """values[(load, policy, kind)] = TPOT p50 per seed; other metrics = 2 x TPOT."""
    rows = []
    for (load, policy, kind), tpots in values.items():
        for seed, t in enumerate(tpots):
            rows.append(
                {"load": load, "seed": seed, "policy": policy, "kind": kind}
                | {m: 2 * t for m in METRICS}
                | {"tpot_p50_s": t}
            )
    return pd.DataFrame(rows)


def test_figures_closed_forms():
    values = {}
    for load, scale in (("light", 1.0), ("moderate", 2.0)):
        for policy, real, sim in (("mtp1", 0.1, 0.11), ("fixed:4", 0.08, 0.12), ("dspark", 0.06, 0.06)):  # fmt: skip  # noqa: E501
            values[(load, policy, "real")] = [scale * real * 0.9, scale * real * 1.1]
            values[(load, policy, "trace")] = [scale * sim, scale * sim]
            values[(load, policy, "preset")] = [scale * real, scale * real]
    frame = frame_of(values)
    results = validation_json(frame)
    v = results["fixed:4"]["trace"]["tpot_p50_s"]
    assert v["loads"]["light"]["real"] == pytest.approx(0.08)
    assert v["loads"]["light"]["real_sd"] == pytest.approx(np.std([0.072, 0.088], ddof=1))
    assert v["loads"]["light"]["error"] == pytest.approx(0.5)
    assert v["real"] == pytest.approx(0.12) and v["error"] == pytest.approx(0.5)
    assert results["dspark"]["preset"]["tpot_p50_s"]["error"] == pytest.approx(0.0)
    for kinds in results.values():
        assert set(kinds) == {"trace", "preset"}
        assert all(set(m) >= {"real", "sim", "error"} for m in kinds["trace"].values())
    assert ranking({"a": 0.2, "b": 0.1, "c": 0.3}) == ["b", "a", "c"]
    assert ratios({"mtp1": 0.2, "dspark": 0.1}) == {"mtp1": 1.0, "dspark": 0.5}
    comp = comparisons(frame)
    light = comp["light"]
    assert light["real"]["ranking"] == ["dspark", "fixed:4", "mtp1"]
    assert light["sim"]["ranking"] == ["dspark", "mtp1", "fixed:4"]
    assert light["ratio_errors"]["fixed:4"] == pytest.approx((0.12 / 0.11) / 0.8 - 1)
    assert light["targets"] == {
        "tpot_p50_within_10pct": False,
        "identical_ranking": False,
        "ratios_within_10pct": False,
    }
    assert "ttft_p50_within_20pct" in comp["moderate"]["targets"]


def test_ranking_gaps_tell_a_clear_pair_apart_and_not_a_near_tie():
    values = {
        ("moderate", "dspark", "real"): [1.0, 1.0, 1.0],
        ("moderate", "mtp1", "real"): [2.0, 2.1, 1.9],  # +100% ± 5.8%: t = 17.3
        ("moderate", "fixed:4", "real"): [3.0, 1.1, 2.5],  # +10% ± 31%: t = 0.33
    }
    values |= {(ld, p, "trace"): [1.0] * 3 for (ld, p, _) in list(values)}
    frame = frame_of(values)
    clear, tie = ranking_gaps(frame, "moderate", ["dspark", "mtp1", "fixed:4"])
    assert (clear["faster"], clear["slower"]) == ("dspark", "mtp1") and clear["resolved"]
    assert clear["difference"] == pytest.approx(1.0)
    assert clear["se"] == pytest.approx(0.1 / np.sqrt(3))
    d = np.array([1.0, -1.0, 0.6])
    assert tie["difference"] == pytest.approx(d.mean() / 2.0) and not tie["resolved"]
    assert tie["se"] == pytest.approx(d.std(ddof=1) / np.sqrt(3) / 2.0)
    # the test's edge, t(0.975, 2) = 4.303: gaps x - 1, x, x + 1 have t = x sqrt(3)
    for x, told in ((2.49, True), (2.47, False)):
        b = [10 + x - 1, 10 + x, 10 + x + 1]
        edge = frame_of({("m", "a", "real"): [10.0] * 3, ("m", "b", "real"): b})
        assert ranking_gaps(edge, "m", ["a", "b"])[0]["resolved"] is told
    comp = comparisons(frame)["moderate"]
    assert comp["real"]["ranking_gaps"] == [clear, tie]
    same = comp["sim"]["ranking"] == comp["real"]["ranking"]
    assert comp["targets"]["identical_ranking"] is same  # the gaps never judge


def test_attribution_factors_multiply_to_the_tpot_error():
    parts = pd.DataFrame(
        [
            {"load": "light", "policy": "mtp1", "tpot_real": 0.1, "tpot_sim": 0.15,
             "step_real_s": 10.0, "model_s": 8.0, "step_predicted_s": 12.0,
             "overhead_charged_s": 1.0, "steps": 100, "tau_real": 1.2, "tau_sim": 1.5},
        ]
    )  # fmt: skip
    a = attribution(parts).iloc[0]
    assert a.passes == pytest.approx(0.3) and a.engine_overhead == pytest.approx(-0.1)
    assert a.overhead_ms_per_step == pytest.approx(20.0)
    assert a.charged_ms_per_step == pytest.approx(10.0) and a.acceptance == pytest.approx(-0.2)
    product = (1 + a.passes + a.engine_overhead) * (1 + a.acceptance) * (1 + a.queueing)
    assert product == pytest.approx(1.5) and a.queueing == pytest.approx(1.5 / 0.96 - 1)


def test_engine_calibration_scales_passes_and_charges_the_overhead_once(tmp_path):
    raw = tmp_path / "raw.csv"
    rows = [
        ("verify", b, r, c, 10.0 + 0.5 * b + 2.0 * r + 0.01 * c + (b * r) % 3)
        for b in (1, 4, 16)
        for r in (1, 4)
        if r <= b
        for c in (128, 512)
    ] + [("prefill", b, 1, c, 30.0 + 0.3 * b + 0.02 * c) for b in (32, 128) for c in (128, 512)]
    write_profile(
        pd.DataFrame(rows, columns=["phase", "batch_tokens", "num_seqs", "context_len",
                                    "latency_ms"]),
        raw, {"method": "test"},
    )  # fmt: skip
    cal = EngineCalibration(1.1, 0.002, 0.0005, 0.0001, ())
    cal.apply(raw, tmp_path / "engine.csv", overhead=True)
    cal.apply(raw, tmp_path / "passes.csv", overhead=False)
    base, engine, passes = (
        LatencyModel.from_csv(tmp_path / f"{n}.csv") for n in ("raw", "engine", "passes")
    )
    for b, r, c in ((1, 1, 128), (3, 2, 300), (16, 4, 700), (8, 1, 512)):
        want = 1.1 * base.latency(b, r, c)
        assert passes.latency(b, r, c) == pytest.approx(want)
        assert engine.latency(b, r, c) == pytest.approx(want + 0.002 + 0.0005 * r + 0.0001 * b)
        mixed = base.step(b, r, c, 64, 1, 256)  # verify and prefill work: a is paid once
        assert engine.step(b, r, c, 64, 1, 256) == pytest.approx(
            1.1 * mixed + 0.002 + 0.0005 * (r + 1) + 0.0001 * b
        )
    meta = profile_metadata(tmp_path / "engine.csv")
    assert meta["method"] == "test" and meta["engine_calibration"]["per_seq_s"] == 0.0005


def test_engine_calibration_fit_recovers_the_overhead_terms():
    a, b, c = 0.001, 0.0012, 0.0002
    runs = [
        {"steps": n, "seqs": n * r, "verify_tokens": n * r * q, "model_s": 0.1 * n * r,
         "predicted_s": 0.09 * n * r, "wall_s": 0.1 * n * r + a * n + b * n * r + c * n * r * q}
        for n, r, q in ((55, 6.6, 2), (55, 6.5, 5), (59, 6.6, 3), (40, 1.7, 2), (40, 1.8, 5))
    ]  # fmt: skip
    cal = EngineCalibration.fit(runs)
    assert (cal.per_step_s, cal.per_seq_s, cal.per_token_s) == pytest.approx((a, b, c))
    assert cal.pass_factor == pytest.approx(0.1 / 0.09)
    first = runs[0]
    charged = cal.overhead_s(first["seqs"], first["verify_tokens"], first["steps"])
    assert charged == pytest.approx(first["wall_s"] - first["model_s"])


class SteppingClocks:
    """A fake timing source for the passes: each reading of the wall clock advances it by
    1 ms x `scale` (x 1 or 3 at random while `jitter`), of the CPU clock by 0.5 ms, so every
    timed pass lasts exactly that."""

    def __init__(self) -> None:
        self.wall_t = self.cpu_t = 0.0
        self.scale = 1.0
        self.slow_down_in: int | None = None  # wall readings until the scale doubles
        self.jitter = False
        self.rng = random.Random(0)

    def wall(self) -> float:
        if self.slow_down_in is not None:
            self.slow_down_in -= 1
            if self.slow_down_in == 0:
                self.scale, self.slow_down_in = 2.0, None
        self.wall_t += 1e-3 * self.scale * (self.rng.choice((1, 3)) if self.jitter else 1)
        return self.wall_t

    def cpu(self) -> float:
        self.cpu_t += 5e-4
        return self.cpu_t


AT6 = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)


def test_reference_samples_price_a_run_and_measure_its_drift_within_it():
    steady = Samples((1.0, 1.0, 1.1, 0.9, 1.0, 1.0), (0.5,) * 6, AT6)
    assert steady.median_wall == 1.0 and steady.drift() == 0.0 and steady.drift("cpu") == 0.0
    slowing = Samples((1.0, 1.0, 1.5, 1.5, 2.0, 2.0), (0.5, 0.5, 0.5, 0.5, 1.0, 1.0), AT6)
    assert slowing.drift() == pytest.approx(1.0) and slowing.drift("cpu") == pytest.approx(1.0)
    assert Samples((1.0, 3.0), (1.0, 3.0), (0.0, 1.0)).drift() == 0.0  # under 3: no thirds
    assert run_factor(1.05, slowing, steady) == pytest.approx(1.05 * 1.5)  # the medians' ratio
    record = slowing.record()
    assert record["passes"] == 6 and record["median_wall_ms"] == pytest.approx(1500.0)
    assert record["unfollowed"] == pytest.approx(slowing.unfollowed())


def test_a_step_change_is_followed_and_a_jumping_core_is_not():
    """Unfollowed drift, closed forms: each pass against the median of its (up to 4)
    neighbours. A core that halves its speed once is followed (only the two passes at the
    step miss, by 1/3 each); one that jumps between two speeds every pass is not."""
    step = Samples((1.0,) * 6 + (2.0,) * 6, (0.5,) * 12, tuple(map(float, range(12))))
    assert step.unfollowed() == pytest.approx((1 / 3 + 1 / 3) / 12)
    assert step.unfollowed() < DRIFT_TOL < step.drift()
    assert step.unfollowed("cpu") == 0.0 and step.drift() == pytest.approx(1.0)
    jumping = Samples((1.0, 3.0, 1.0, 3.0, 1.0, 3.0), (0.5,) * 6, AT6)
    assert jumping.unfollowed() == pytest.approx(7 / 9) and jumping.unfollowed() > DRIFT_TOL
    assert Samples((1.0, 3.0), (1.0, 1.0), (0.0, 1.0)).unfollowed() == 0.0  # under 3 passes


def test_the_trace_gap_tells_even_jitter_from_passes_slowed_now_and_then():
    """Closed forms: the trace (medians of up to 5, centred) against the passes' mean. Even
    jitter about a speed: no gap; one pass in six slowed 4x: the trace stays at 1 where the
    passes average 1.5 (-1/3), though both read alike as unfollowed drift."""
    even = Samples((0.9, 1.1, 0.9, 1.1, 0.9, 1.1), (0.5,) * 6, AT6)
    spiked = Samples((1.0, 1.0, 1.0, 1.0, 1.0, 4.0), (0.5,) * 6, AT6)
    assert even.gap() == pytest.approx(0.0, abs=1e-12) and spiked.gap() == pytest.approx(-1 / 3)
    assert spiked.record()["trace_gap"] == spiked.gap() and Samples((), (), ()).gap() == 0.0


def test_the_speed_trace_prices_each_step_at_the_core_speed_of_its_moment():
    calibration = Samples((0.5, 0.5, 0.5), (0.5,) * 3, (0.0, 1.0, 2.0))
    trace = Samples((1.0, 1.0, 1.0, 2.0, 2.0, 2.0), (0.5,) * 6, AT6).trace(calibration)
    assert trace.speed.tolist() == [2.0, 2.0, 2.0, 4.0, 4.0, 4.0]  # windows of 5, centred
    got = trace(np.array([-5.0, 2.4, 2.6, 99.0]))  # before, nearer pass 2, nearer 3, after
    assert got.tolist() == [2.0, 2.0, 4.0, 4.0]
    clock = trace.clock()
    assert clock.seconds(clock.start(2.6), 0.25) == 1.0
    short = Samples((), (), ())  # a run that never reached its first pass
    assert short.trace(calibration)(np.array([0.0, 9.0])).tolist() == [1.0, 1.0]
    assert run_factor(1.05, short, calibration) == 1.05


def test_a_trace_clock_scales_every_step_of_a_simulation_and_nothing_else(tmp_path):
    """At a constant speed s (every request there at 0, so no arrival falls elsewhere in the
    schedule) a simulation is the profile clock's run with every step s times as long: the
    same steps and tokens, latencies and finish times x s."""
    profile = write_flat_profile(tmp_path / "p.csv", 10.0)
    spec = RunSpec(profile=str(profile), policy="fixed:3", acceptance="iid:0.7", gamma=3)
    inputs = resolve(spec)
    work = Workload(np.zeros(6), np.full(6, 32), np.array([5, 40, 9, 17, 3, 22]), "test")

    def run(clock):
        return run_engine(inputs.engine, work, Simulated(inputs.acceptance), clock=clock)

    base = run("profile")
    same = run(SpeedTrace(np.array([0.0]), np.array([1.0])).clock)
    assert same.requests.equals(base.requests)
    slowed = run(SpeedTrace(np.array([0.0, 1.0]), np.array([2.0, 2.0])).clock)
    assert np.allclose(slowed.steps.latency_s, 2 * base.steps.latency_s)
    assert np.allclose(slowed.requests["finish_s"], 2 * base.requests["finish_s"])
    assert slowed.requests["output_tokens"].equals(base.requests["output_tokens"])


def test_the_reference_pass_is_left_out_of_the_runs_clock():
    ref = Reference(tiny_target(), PassClocks(), every=1)
    clock = ref.clock()
    started = clock.start(3.5)
    for _ in range(5):
        ref.measure()
    inside = clock.seconds(started, 0.0)  # what a step around them would have lasted
    samples = ref.take()
    assert len(samples.wall) == len(samples.cpu) == 5 and min(samples.wall) > 0
    assert samples.at == (3.5,) * 5  # stamped with the engine time of their step
    assert 0 <= inside < 0.5 * sum(samples.wall)
    assert ref.take() == Samples((), (), ())  # taken: the next run starts afresh


def test_drift_rule_reruns_once_and_voids_a_triple_that_drifts_again():
    def run(policy: str, k: float, unfollowed: float) -> RunDrift:
        ref = {"passes": 9, "median_wall_ms": 2.0, "median_cpu_ms": 1.0, "drift": -0.3}
        ref |= {"cpu_drift": 0.1, "unfollowed": unfollowed, "cpu_unfollowed": unfollowed / 2}
        ref |= {"trace_gap": -0.01}
        return RunDrift(policy, k, ref)

    drifted = TripleDrift("light", 0, 1, (run("mtp1", 1.0, 0.02), run("dspark", 1.2, 0.2)))
    assert drifted.change == pytest.approx(0.2) and drifted.cpu_change == pytest.approx(0.1)
    assert not drifted.within and not drifted.settled(reruns_left=RERUNS_TOTAL)
    assert drifted.settled(reruns_left=0)  # the study is out of re-runs: kept, drifted
    again = TripleDrift("light", 0, 2, (run("mtp1", 1.3, 0.15), run("dspark", 0.9, 0.0)))
    assert again.settled(RERUNS_TOTAL) and not again.within  # out of its re-runs: kept, drifted
    fine = TripleDrift("light", 1, 1, (run("mtp1", 0.95, 0.05), run("dspark", 0.97, 0.1)))
    assert fine.within and fine.settled(reruns_left=0)
    v = verdict([drifted.record(kept=False), again.record(kept=True), fine.record(kept=True)])
    assert not v["valid"] and v["reruns"] == 1 and v["pass_factor_range"] == [0.9, 1.3]
    text = "\n".join(report_drift(v))
    assert "**beyond**" in text and "(light seed 0)" in text and "1 triple re-run" in text
    assert text.count("| light | 0 |") == 4 and "| re-run, drifted |" in text
    assert "| kept, drifted |" in text and "| kept |" in text
    ok = verdict([fine.record(kept=True)])
    assert ok["valid"] and "every triple within the 10% tolerance" in "\n".join(report_drift(ok))


class FakeTime:
    """A study clock that moves only when told."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


NOON = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_projection_closed_form_from_profiling_then_from_measured_runs():
    """After profiling: elapsed + the phases' shares of it + the runs at its run share; after
    runs: elapsed + the runs left at their mean; the end time is now + what is left."""
    now = FakeTime()
    timeline = Timeline(
        0.0, 600.0, {"light": 6}, now=now, utc_now=lambda: NOON + dt.timedelta(seconds=now.t)
    )
    now.t = 100.0
    line = timeline.after_profiling(100.0, calibrate=2.0, run=0.5)
    first = 100 + 100 * (CALIBRATE_SHARE * 2 + RATE_RULE_SHARE) + 6 * 100 * RUN_SHARE * 0.5
    assert timeline.projected_s() == pytest.approx(first)
    assert line.startswith("projected total ") and "0/6 runs done" in line
    assert f"ending ~{NOON + dt.timedelta(seconds=first):%H:%M:%S} UTC" in line
    now.t = 150.0
    timeline.phase_done("calibrate")
    timeline.phase_done("rate rule")
    assert timeline.projected_s() == pytest.approx(150 + 6 * 100 * RUN_SHARE * 0.5)
    now.t = 180.0
    timeline.run_done("light", 30.0)
    now.t = 220.0
    line = timeline.run_done("light", 40.0)
    assert timeline.projected_s() == pytest.approx(220 + 4 * 35) and "2/6 runs done" in line
    assert "a run light 35.0 s (measured)" in line and "ending ~12:06:00 UTC" in line
    assert timeline.fits({"light": 3}) and 220 + 7 * 35 <= 600  # a re-run of a triple fits
    tight = Timeline(0.0, 400.0, {"light": 6}, now=now, runs=[("light", 30.0), ("light", 40.0)])
    assert not tight.fits({"light": 3})  # 220 + 7 x 35 = 465 s > 400 s
    assert [h["when"] for h in timeline.history] == [
        "after profiling",
        "after run 1",
        "after run 2",
    ]
    last = timeline.history[-1]
    assert last["projected_total_s"] == pytest.approx(360.0) and last["runs_done"] == 2
    assert last["per_run_s"] == {"light": pytest.approx(35.0)}
    assert last["projected_end_utc"] == "2026-01-01 12:06:00"
    assert (
        timeline.summary() == f"{int(first // 60)}m{int(first % 60):02d}s after profiling, "
        "6m00s after run 2 (budget 10m00s)"
    )


def test_loads_weighed_by_their_simulated_busy_time():
    """6 light runs weighing 3 and 6 moderate weighing 2 (a light run 1.5x a moderate one):
    before any run the prior (60 s, the mean run) is shared so that its total stays 12 x 60 s;
    after light runs of 72 and 78 s (25 s a unit of weight) a moderate run costs 50 s; a
    re-run is priced at its own load."""
    now = FakeTime()
    timeline = Timeline(0.0, 1e4, {"light": 6, "moderate": 6}, now=now, prior_run_s=60.0)
    equal = timeline.projected_s()
    line = timeline.weigh_loads({"light": 3.0, "moderate": 2.0})
    assert timeline.projected_s() == pytest.approx(equal) == pytest.approx(12 * 60.0)
    assert timeline.run_s("light") == pytest.approx(72.0)
    assert timeline.run_s("moderate") == pytest.approx(48.0)
    assert "a run light 72.0 s / moderate 48.0 s" in line and "weighed" in line
    now.t = 150.0
    timeline.run_done("light", 72.0)
    timeline.run_done("light", 78.0)
    assert timeline.run_s("moderate") == pytest.approx(50.0)
    assert timeline.projected_s() == pytest.approx(150 + 4 * 75 + 6 * 50)
    assert timeline.projected_s({"moderate": 2}) == pytest.approx(150 + 4 * 75 + 8 * 50)
    timeline.add_runs("light", 3)
    assert timeline.runs_total == 15
    assert timeline.projected_s() == pytest.approx(150 + 7 * 75 + 6 * 50)
    for bad in ({"light": 3.0}, {"light": 3.0, "moderate": 0.0}):
        with pytest.raises(ValueError, match="needs a weight > 0"):
            timeline.weigh_loads(bad)


@pytest.mark.parametrize(
    ("budget", "expected"),
    [(1000.0, 10), (100 + 12 * 9 * 5.0, 9), (100 + 12 * 8 * 5.0 + 1, 8), (300.0, 8)],
)
def test_runs_are_sized_to_the_budget_down_to_the_floor(budget, expected):
    """100 s elapsed, nothing ahead, 12 runs of 10 requests at 50 s (5 s a request): the most
    requests whose projection 100 + 12 x 5 n fits the budget, never below the floor (8 of 10),
    and the projection's runs take that size."""
    now = FakeTime()
    now.t = 100.0
    timeline = Timeline(0.0, budget, {"light": 12}, now=now, prior_run_s=50.0)
    assert timeline.sized_requests(10) == expected
    assert timeline.run_s("light") == pytest.approx(5.0 * expected)
    assert timeline.projected_s() == pytest.approx(100 + 12 * 5.0 * expected)
    assert expected >= MIN_REQUESTS_SHARE * 10


def test_a_sized_study_serves_the_sized_runs_and_says_so(tmp_path):
    """A bench whose projection does not fit serves 8 of its 10 requests a run, logged."""
    lines, now = [], FakeTime()
    now.t = 100.0
    bench = Bench(Settings(requests=10), tmp_path, None, None, lines.append, None)
    sized = sized_runs(bench, Timeline(0.0, 300.0, {"light": 12}, now=now, prior_run_s=50.0))
    assert sized.settings.requests == 8 and bench.settings.requests == 10
    assert lines[0].startswith("runs sized to 8 requests (of 10) to fit the budget: projected")
    fits = Timeline(0.0, 1e4, {"light": 12}, now=now, prior_run_s=50.0)
    assert sized_runs(bench, fits) is bench and len(lines) == 1


def test_a_drifted_triple_is_re_run_only_while_the_projection_fits_the_budget(
    monkeypatch, tmp_path
):
    """Every attempt drifts and every run takes 30 s: with 0 s ahead and 2 policies, the first
    triple's re-run (2 triples x 2 runs + 2 = 6 runs, 180 s) fits a 200 s budget; the second
    triple's (elapsed 180 s + 0 runs left + 2 = 240 s) does not, so it is kept, drifted."""
    now, lines = FakeTime(), []
    settings = Settings(policies=("mtp1", "dspark"), loads=(("light", 0.3),), repeats=2)
    bench = SimpleNamespace(settings=settings, out=tmp_path, log=lines.append)
    timeline = Timeline(0.0, 200.0, {"light": 4}, now=now, prior_run_s=30.0)

    def serve_triple(bench, base, pricing, key, rate, inputs, timeline):
        for _ in settings.policies:
            now.t += 30.0
            timeline.run_done("light", 30.0)
        run = RunDrift("mtp1", 1.0, {"unfollowed": 0.5, "cpu_unfollowed": 0.5})
        return ([], [], []), TripleDrift(key[0], key[1], key[2], (run,))

    monkeypatch.setattr(study, "serve_triple", serve_triple)
    plan = {"light": {"rate": 1.0}}
    prompts = [Prompt(f"p{i}", "chat", "q") for i in range(4)]
    _, records = study.serve_all(bench, None, plan, ([0, 1], prompts), "t", None, timeline)
    assert [(r["seed"], r["attempt"], r["kept"]) for r in records] == [
        (0, 1, False), (0, 2, True), (1, 1, True),
    ]  # fmt: skip
    assert timeline.runs_total == 6 and len(timeline.runs) == 6
    assert lines == ["light seed 0 drifted +50.0%: re-run",
                     "light seed 1 drifted +50.0%: kept, a re-run would end at 4m00s, "
                     "past the budget"]  # fmt: skip
    assert not verdict(records)["valid"]


def test_validate_end_to_end_on_the_tiny_target(inputs, tmp_path):
    """The whole study, its passes timed by a fake clock that jumps between two speeds at random
    through the first run, then slows to half speed in the middle of the second: the first is
    beyond what its trace can follow, so that triple is re-run; the second's trace follows the
    slow-down, and every later run is priced at twice the calibration's speed."""
    ckpt, prompts, trace = inputs
    settings = Settings(
        ckpt,
        trace,
        prompts,
        None,  # profiled here, on this machine, before the real runs
        policies=("mtp1", "dspark"),
        loads=(("light", 0.3), ("moderate", 0.6)),
        repeats=2,
        requests=4,
        max_new_tokens=8,
        target="tiny",
        profile_contexts=(16, 32),
        reference_every=1,
        draws=3,
    )
    out = tmp_path / "validation"
    lines: list[str] = []
    fake = SteppingClocks()

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("[1/8] light seed 0 mtp1"):
            fake.jitter = True
        if line.startswith("[2/8] light seed 0 dspark"):
            fake.jitter, fake.slow_down_in = False, 90  # about half way through its readings

    results = validate(settings, out, log=log, clocks=PassClocks(fake.wall, fake.cpu))
    saved = json.loads((out / "validation.json").read_text())
    assert set(saved) == {"mtp1", "dspark"} and saved == json.loads(json.dumps(results))
    for policy in saved.values():
        assert set(policy) == {"trace", "preset"}
        for metrics in policy.values():
            assert set(metrics) == set(METRICS)
            for v in metrics.values():
                assert v["error"] == pytest.approx((v["sim"] - v["real"]) / v["real"])
                assert set(v["loads"]) == {"light", "moderate"}
                assert len(v["loads"]["light"]["real_runs"]) == 2
    assert_each_simulation_the_mean_of_its_draws(out, saved, draws=3)
    served = [json.loads(x)["id"] for x in (out / "prompts-served.jsonl").read_text().splitlines()]
    assert served == ["p1", "p3", "p5"]
    half, _ = read_acceptance_trace(out / "trace-half.parquet")
    assert set(half["seq_id"]) == {0, 2, 4}
    for seed, first in ((0, ["p1", "p3", "p5", "p1"]), (1, ["p3", "p5", "p1", "p3"])):
        texts = (out / "runs" / "light" / f"s{seed}" / "dspark-real" / "texts.jsonl").read_text()
        assert [json.loads(x)["prompt_id"] for x in texts.splitlines()] == first
    comp = json.loads((out / "comparison.json").read_text())
    assert comp["loads"]["light"]["rate"] < comp["loads"]["moderate"]["rate"]
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    assert len(diagnostics["runs"]) == 2 * 2 * 2
    assert all(0 < r["real_busy"] <= 1 for r in diagnostics["runs"])
    for r in diagnostics["runs"]:  # each real run's priced steps add up to its check
        folder = out / r["folder"] / f"{r['policy']}-real"
        steps = pd.read_csv(folder / "steps.csv")
        assert len(steps) == r["step_model"]["all_steps"]
        assert steps["predicted_s"].sum() == pytest.approx(
            r["step_model"]["all_predicted_s"], rel=1e-5
        )
        assert steps["real_s"].sum() == pytest.approx(r["step_model"]["all_real_s"], rel=1e-5)
        assert (steps["batch_tokens"] >= steps["num_running"]).all()
    report = (out / "report.md").read_text()
    assert "ttft_p50_within_20pct" in report and ("met**" in report or "missed**" in report)
    pairs = [line for line in report.splitlines() if line.startswith("Real ranking's adjacent")]
    assert len(pairs) == 2 and all(" < " in p and "told apart)" in p for p in pairs)  # per load
    chances = [line for line in report.splitlines() if line.startswith("Chance that a simul")]
    for load, c in json.loads((out / "comparison.json").read_text())["by_load"].items():
        assert [g["faster"] for g in c["real"]["ranking_gaps"]] == c["real"]["ranking"][:1], load
        assert 0.0 <= c["real"]["ranking_chance"] <= 1.0, load  # two seeds: a spread to read
        assert sum(f": {c['real']['ranking_chance']:.2f}." in line for line in chances) >= 1
    assert len(chances) == 2  # per load
    assert sum(line.startswith("[") for line in lines) == 10  # a line per real run, re-run too
    assert "[10/10] moderate seed 1 dspark" in "\n".join(lines)  # the re-run's runs counted
    projected = [j for j, line in enumerate(lines) if line.startswith("projected total ")]
    assert len(projected) == 2 + 10  # after profiling, the rate rule, then every run
    assert lines[projected[0] - 1].startswith("profiling tiny")
    assert lines[projected[0] + 1].startswith("calibrating the engine")
    assert lines[projected[1] - 1].startswith("load moderate: mtp1 busy")
    assert "weighed by their simulated busy time" in lines[projected[1]]
    assert all(lines[j - 1].startswith("[") for j in projected[2:])
    history = diagnostics["projection"]
    assert [h["runs_done"] for h in history] == [0, *range(11)]
    plan = comp["loads"]
    assert all(plan[load]["run_busy_s"] > 0 for load in ("light", "moderate"))
    assert set(history[1]["per_run_s"]) == {"light", "moderate"}
    assert history[0]["runs_total"] == 8 and history[-1]["runs_total"] == 10
    assert history[-1]["elapsed_s"] == pytest.approx(history[-1]["projected_total_s"])
    assert diagnostics["meta"]["projected_total"].endswith("(budget 22m00s)")
    profile = read_profile(out / "profile.csv")
    assert set(profile["phase"]) == {"verify", "prefill"}
    focus = profile_metadata(out / "profile.csv")["focus"]  # the small cells, medians of 15
    assert focus.pop("seconds") > 0 and focus == {"max_seqs": 2, "rounds": 2, "repeats": 15}
    cal = json.loads((out / "calibration" / "engine.json").read_text())
    assert len(cal["runs"]) == 2 * 2 and cal["pass_factor"] > 0  # bursts of 2 and 8, 2 policies
    assert min(cal["per_step_s"], cal["per_seq_s"], cal["per_token_s"]) >= 0
    engine = read_profile(out / "profile-engine.csv")
    tokens = np.where(profile["phase"] == "verify", profile["batch_tokens"], 0)
    extra = cal["per_step_s"] + cal["per_seq_s"] * profile["num_seqs"] + cal["per_token_s"] * tokens
    want = profile["latency_ms"] * cal["pass_factor"] + 1e3 * extra
    assert np.allclose(engine["latency_ms"], want, rtol=1e-5)
    assert (out / "calibration" / "dspark-8-real" / "texts.jsonl").exists()
    assert all(json.loads(x)["id"] in {"p0", "p2", "p4"} for x in
               (out / "prompts-calibration.jsonl").read_text().splitlines())  # fmt: skip
    assert_every_run_priced_by_its_own_reference(out, comp["machine_drift"], cal, diagnostics)


def assert_each_simulation_the_mean_of_its_draws(out, saved, draws):
    """Every kept run's two simulations: `draws` acceptance draws, the run's own seed first and
    then seeds of their own; the first written as the run's simulation; the saved per-run value
    their mean."""
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    for kind in ("trace", "preset"):
        sims: dict[str, list[float]] = {}
        for r in diagnostics["runs"]:
            folder = out / r["folder"]
            name = run_name(r["policy"])
            table = pd.read_csv(folder / f"{name}-{kind}-draws.csv")
            assert list(table["draw"]) == list(range(draws))
            assert table["seed"].iloc[0] == r["seed"] and table["seed"].nunique() == draws
            first = json.loads((folder / f"{name}-{kind}" / "summary.json").read_text())
            assert table["tpot_p50_s"].iloc[0] == first["tpot_p50_s"]
            sims.setdefault(r["policy"], []).append(table["tpot_p50_s"].mean())
        for policy, values in sims.items():
            saved_runs = [
                v for load in ("light", "moderate")
                for v in saved[policy][kind]["tpot_p50_s"]["loads"][load]["sim_runs"]
            ]  # fmt: skip
            assert sorted(saved_runs) == pytest.approx(sorted(values), rel=1e-12)
    # a draw does not depend on the draws before it: the last, simulated alone, is the same
    r = diagnostics["runs"][-1]
    folder = out / r["folder"]
    kept = KeptRun.read(folder, r["policy"])
    alone = replace(kept.spec, seed=draw_seed(kept.spec.seed, draws - 1))
    _, last = simulate_draws(alone, kept.work, kept.speed, 1)
    table = pd.read_csv(folder / f"{run_name(r['policy'])}-trace-draws.csv")
    assert last["tpot_p50_s"].iloc[0] == table["tpot_p50_s"].iloc[-1]


def assert_every_run_priced_by_its_own_reference(out, drift, cal, diagnostics):
    """The jumping core caught inside light seed 0's first run and that triple re-run; the
    slow-down inside its second followed by that run's trace; every run's simulations on the
    study's engine profiles, each step scaled by its own trace; every attempt in the report."""
    records = drift["triples"]
    assert [(r["load"], r["seed"], r["attempt"], r["kept"]) for r in records] == [
        ("light", 0, 1, False), ("light", 0, 2, True), ("light", 1, 1, True),
        ("moderate", 0, 1, True), ("moderate", 1, 1, True),
    ]  # fmt: skip
    first = records[0]["runs"]
    assert first[0]["reference"]["unfollowed"] > 0.25 and not records[0]["within"]
    assert first[1]["reference"]["unfollowed"] < DRIFT_TOL  # the slow-down: followed
    assert first[1]["reference"]["drift"] == pytest.approx(1.0, abs=0.25)
    assert records[0]["cpu_change"] < 0.01  # the CPU clock never moved
    assert all(r["within"] and r["change"] <= DRIFT_TOL for r in records[1:])
    assert drift["valid"] and drift["reruns"] == 1
    ref_cal = diagnostics["meta"]["reference_calibration"]["median_wall_ms"]
    for r in records:
        folder = out / "runs" / r["load"] / f"s{r['seed']}{'-rerun' * (r['attempt'] - 1)}"
        for run in r["runs"]:
            k = cal["pass_factor"] * run["reference"]["median_wall_ms"] / ref_cal
            assert run["pass_factor"] == pytest.approx(k) and run["reference"]["passes"] >= 6
            trace = pd.read_csv(folder / f"{run['policy']}-reference.csv")
            assert len(trace) == run["reference"]["passes"]
            assert trace["at_s"].is_monotonic_increasing
            windows = trace["reference_wall_s"].rolling(5, center=True, min_periods=1).median()
            assert np.allclose(trace["speed"], windows / (ref_cal / 1e3))
            steps = pd.read_csv(folder / f"{run['policy']}-real" / "steps.csv")
            nearest = np.abs(steps["start_s"].to_numpy()[:, None] - trace["at_s"].to_numpy())
            assert np.allclose(steps["speed"], trace["speed"].to_numpy()[nearest.argmin(1)])
            sim = json.loads((folder / f"{run['policy']}-trace" / "summary.json").read_text())
            assert sim["spec"]["profile"] == str(out / "profile-engine.csv")
    slowed = pd.read_csv(out / "runs" / "light" / "s0" / "dspark-reference.csv")["speed"]
    assert slowed.iloc[0] == pytest.approx(1.0) and slowed.iloc[-1] == pytest.approx(2.0)
    for r in records[1:]:  # after the slow-down every pass, the reference's too, takes 2x
        assert all(run["pass_factor"] == pytest.approx(2 * cal["pass_factor"]) for run in r["runs"])
    kept = {(r["load"], r["seed"]): r["folder"] for r in diagnostics["runs"]}
    assert kept[("light", 0)] == "runs/light/s0-rerun" and kept[("light", 1)] == "runs/light/s1"
    report = (out / "report.md").read_text()
    assert "every triple within the 10% tolerance; 1 triple re-run" in report
    table = report.split("## Drift per run")[1].split("\n\n")[1].splitlines()
    assert len(table) == 2 + 2 * len(records) and "| light | 0 | 1 | mtp1 |" in table[2]
    assert table[2].endswith("| re-run, drifted |") and table[4].endswith("| kept |")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--loads", "light=1.5"], "NAME=BUSY"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--draws", "0"], "--draws must be >= 1"),
        (["--policies", "oracle"], "cannot be served"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    monkeypatch, capsys, tmp_path, inputs, args, message
):
    ckpt, prompts, trace = inputs
    out = tmp_path / "out"
    common = ["--drafter", str(ckpt), "--acceptance", str(trace), "--prompts", str(prompts)]
    code, _, err = run_cli(
        monkeypatch, capsys, "validate", "--out", str(out), "--target", "tiny", *common, *args
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_trace_without_rows_on_the_trace_half_exits_2(monkeypatch, capsys, tmp_path, inputs):
    ckpt, prompts, trace = inputs
    full, meta = read_acceptance_trace(trace)
    odd = tmp_path / "odd.parquet"
    write_acceptance_trace(full[full["seq_id"] % 2 == 1], odd, meta)
    out = tmp_path / "out"
    code, _, err = run_cli(
        monkeypatch, capsys, "validate", "--out", str(out), "--target", "tiny",
        "--drafter", str(ckpt), "--acceptance", str(odd), "--prompts", str(prompts),
    )  # fmt: skip
    assert code == 2 and "no rows on the trace half" in err and not out.exists()


HISTORY = re.compile(r"issues? \d+|\bv\d+\b", re.IGNORECASE)


@pytest.mark.parametrize("command", ["validate", "serve"])
def test_help_speaks_of_the_tool_not_its_history(monkeypatch, capsys, command):
    """Version notes and issue numbers live in the validation study's README, not the help."""
    monkeypatch.setenv("COLUMNS", "400")  # no line break inside a note
    code, out, _ = run_cli(monkeypatch, capsys, command, "--help")
    assert code == 0 and "--max-new-tokens" in out
    assert not HISTORY.search(out), HISTORY.search(out)


def test_the_study_keeps_no_version_diary():
    package = ROOT / "dsim" / "validation"
    for path in [*package.glob("*.py"), ROOT / "dsim" / "real" / "commands.py"]:
        assert not HISTORY.search(path.read_text()), path
