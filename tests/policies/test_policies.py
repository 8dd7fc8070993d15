"""Verification policies: optimality of the DSpark scheduler, edge cases, and its rivals."""

from __future__ import annotations

import ast
import itertools
import re

import numpy as np
import pytest
from conftest import ROOT, example_specs, run_cli

from dsim.errors import InputError
from dsim.policies import (
    POLICY_NAMES,
    DSparkAsync,
    Goodput,
    Threshold,
    Traits,
    dspark_lengths,
    global_capacity,
    parse_policy,
    policy_traits,
    policy_usage,
)
from dsim.policies.check import random_conf, random_sps
from dsim.policies.registry import BUILT_INS
from dsim.policies.schedule import _sla_stop_dense, candidates, sla_stop, throughput


def convex_latency(knee: float, slope: float = 1.0, base: float = 0.0):
    """SPS of a roofline-like step: latency = base + max(knee, slope * B) (convex in B)."""
    return lambda b: 1.0 / (base + np.maximum(knee, slope * np.asarray(b, dtype=float)))


def objective(conf: np.ndarray, lengths: np.ndarray, sps) -> float:
    a = np.cumprod(conf, axis=1)
    tau = conf.shape[0] + sum(a[r, : lengths[r]].sum() for r in range(conf.shape[0]))
    return float(tau * sps(np.array([conf.shape[0] + lengths.sum()]))[0])


@pytest.mark.parametrize("seed", range(40))
def test_dspark_maximises_throughput_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    r, gamma = rng.integers(1, 4), rng.integers(1, 4)
    conf = rng.uniform(0, 1, size=(r, gamma)) ** rng.uniform(0.2, 2)
    sps = convex_latency(knee=rng.uniform(1, 8), base=rng.uniform(0, 3))
    best = max(
        objective(conf, np.array(ls), sps) for ls in itertools.product(range(gamma + 1), repeat=r)
    )
    got = dspark_lengths(conf, sps)
    assert objective(conf, got, sps) == pytest.approx(best, rel=1e-12)


def test_lengths_bounded_and_zero_confidence_gets_zero():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 1, size=(64, 7))
    conf[3] = 0.0
    conf[5, 2:] = 0.0
    lengths = dspark_lengths(conf, lambda b: np.ones_like(b, dtype=float))
    assert lengths.dtype == np.int64
    assert lengths.min() >= 0 and lengths.max() <= 7
    assert lengths[3] == 0 and lengths[5] == 2
    assert (lengths[np.arange(64) != 5][np.arange(63) != 3] == 7).all()


def test_table_sps_equals_callable():
    rng = np.random.default_rng(1)
    conf = rng.uniform(0.3, 1, size=(32, 7))
    sps = convex_latency(knee=40, base=5)
    table = sps(np.arange(32 * 8 + 1))
    np.testing.assert_array_equal(dspark_lengths(conf, sps), dspark_lengths(conf, table))


def test_budget_large_when_flat_and_shrinks_with_concurrency():
    rng = np.random.default_rng(2)
    sps = convex_latency(knee=64, base=20)
    budgets = []
    for r in (4, 16, 64, 256):
        conf = rng.uniform(0.6, 0.95, size=(r, 7))
        budgets.append(dspark_lengths(conf, sps).mean())
    assert budgets[0] > 4
    assert all(a >= b for a, b in zip(budgets, budgets[1:], strict=False))
    assert budgets[-1] < budgets[0] / 2


def test_early_stop_differs_from_global_search_on_a_jagged_profile():
    conf = np.array([[0.9, 0.9, 0.9]])
    # latency cliff at B = 2 then flat: greedy stops at 0, global search goes to 3
    lat = {1: 1.0, 2: 2.0, 3: 2.0, 4: 2.0}
    sps = lambda b: 1.0 / np.array([lat[int(x)] for x in np.atleast_1d(b)])  # noqa: E731
    assert dspark_lengths(conf, sps).tolist() == [0]
    assert global_capacity(conf, sps) == 3


def reference_lengths(conf: np.ndarray, sps: np.ndarray, sla: float | None) -> np.ndarray:
    """Algorithm 1 with the SLA rule, one candidate at a time: admit in descending survival
    (ties by request, then position); stop at the first candidate that does not raise the
    expected throughput or that takes a request meeting the SLA below it."""
    r, gamma = conf.shape
    a = np.cumprod(conf, axis=1).ravel()
    order = [i for i in np.argsort(-a, kind="stable") if a[i] > 0]
    gained, total, best = np.zeros(r), 0.0, r * sps[r]
    lengths = np.zeros(r, np.int64)
    for b, i in enumerate(order, start=r + 1):
        q = i // gamma
        after = gained.copy()
        after[q] += a[i]
        theta = (r + total + a[i]) * sps[b]
        if theta <= best:
            break
        if sla is not None:
            met = sps[b - 1] >= sla / (1.0 + gained)
            if (met & (sps[b] < sla / (1.0 + after))).any():
                break
        gained, total, best = after, total + a[i], theta
        lengths[q] += 1
    return lengths


@pytest.mark.parametrize("seed", range(300))
def test_sla_rule_matches_the_one_at_a_time_reference(seed):
    rng = np.random.default_rng(seed)
    r, gamma = int(rng.integers(1, 7)), int(rng.integers(1, 6))
    conf = random_conf(rng, r, gamma)
    sps = random_sps(rng, r * (gamma + 1))
    if seed % 3 == 0:  # SPS that rises somewhere: the dense path
        sps = sps * rng.uniform(0.8, 1.2, len(sps))
    sla = rng.choice([None, 0.6, 1.0, 1.4, 2.5, 1e9])
    sla = None if sla is None else float(sla) * sps[r]
    np.testing.assert_array_equal(dspark_lengths(conf, sps, sla), reference_lengths(conf, sps, sla))


@pytest.mark.parametrize("seed", range(200))
def test_sla_fast_path_equals_dense_path(seed):
    rng = np.random.default_rng(seed)
    r, gamma = int(rng.integers(1, 40)), int(rng.integers(1, 8))
    conf = random_conf(rng, r, gamma)
    rows, survival = candidates(conf)
    speed, _ = throughput(random_sps(rng, r * (gamma + 1)), r, survival)
    sla = float(rng.uniform(0.3, 3.0) * speed[0])
    k = len(rows)
    assert sla_stop(rows, survival, r, k, speed, sla) == _sla_stop_dense(
        rows, survival, r, speed, sla
    )


@pytest.mark.parametrize("seed", range(200))
def test_sla_fast_path_equals_dense_path_at_the_boundary(seed):
    """An SLA met exactly (SPS x tau == SLA) at some step: both paths must sum each request's
    tau in the same order, or the path taken (which depends on how many candidates there are)
    decides the admission. dspark-async's lossless breach: survival 0.15 at SPS 1 then 0.5."""
    rng = np.random.default_rng(seed)
    r, gamma = int(rng.integers(1, 8)), int(rng.integers(2, 8))
    conf = np.round(random_conf(rng, r, gamma), 2)  # decimals: sums that round in float
    rows, survival = candidates(conf)
    if not len(rows):
        return
    speed, _ = throughput(random_sps(rng, r * (gamma + 1)), r, survival)
    i = int(rng.integers(0, len(rows)))
    tau = 1.0 + np.cumsum(np.where(rows[: i + 1] == rows[i], survival[: i + 1], 0.0))[-1]
    sla = float(speed[i + 1] * tau)
    k = len(rows)
    assert sla_stop(rows, survival, r, k, speed, sla) == _sla_stop_dense(
        rows, survival, r, speed, sla
    )


def test_the_boundary_counterexample_stops_on_both_paths():
    """tau 1.15 at SPS 0.5 drops a request that met 1 tok/s at tau 1 and SPS 1: admit none."""
    rows, survival, speed = np.array([0]), np.array([0.15]), np.array([1.0, 0.5])
    assert sla_stop(rows, survival, 1, 1, speed, 1.0) == 0
    assert _sla_stop_dense(rows, survival, 1, speed, 1.0) == 0


def test_sla_stops_happen_in_the_random_instances():
    """The two tests above mean something only if the SLA often stops admission early."""
    rng = np.random.default_rng(0)
    stopped = 0
    for _ in range(300):
        r, gamma = int(rng.integers(1, 7)), int(rng.integers(1, 6))
        conf, sps = random_conf(rng, r, gamma), random_sps(rng, r * (gamma + 1))
        sla = 1.4 * sps[r]
        stopped += dspark_lengths(conf, sps, sla).sum() < dspark_lengths(conf, sps).sum()
    assert stopped >= 20


def test_issue_sla_counterexample_verifies_draft_1_whatever_draft_1_is():
    """Issue 11: SPS (1, 0.95, 0.9) at B = 1, 2, 3, c_1 = 0.8, c_2 = 0.9 after token A and 0
    after B, SLA 1.75. The old cut verified 2 after A and 0 after B (draft 1 verified only
    when it is A); the prefix rule verifies draft 1 in both cases."""
    sps = np.array([np.nan, 1.0, 0.95, 0.9])
    assert dspark_lengths(np.array([[0.8, 0.9]]), sps, 1.75).tolist() == [2]
    assert dspark_lengths(np.array([[0.8, 0.0]]), sps, 1.75).tolist() == [1]


@pytest.mark.parametrize("seed", range(20))
def test_infeasible_sla_keeps_algorithm_1s_schedule(seed):
    rng = np.random.default_rng(seed)
    conf = rng.uniform(0.2, 1.0, size=(int(rng.integers(1, 9)), 5))
    sps = convex_latency(knee=rng.uniform(1, 30), base=rng.uniform(0.5, 3))
    free = dspark_lengths(conf, sps)
    np.testing.assert_array_equal(dspark_lengths(conf, sps, sla_tps=1e9), free)
    # the old cut verified nothing here, the slowest round for every request
    issue_sps = np.array([np.nan, 1.0, 0.95, 0.9])
    assert dspark_lengths(np.array([[0.8, 0.9]]), issue_sps, 1e9).tolist() == [2]


def test_threshold_takes_longest_prefix_above_h():
    conf = np.array([[0.9, 0.9, 0.9], [0.5, 1.0, 1.0], [0.95, 0.99, 0.1]])
    np.testing.assert_array_equal(Threshold(0.8, "t").lengths(conf, None, None), [2, 0, 2])


def goodput_objective(p: np.ndarray, r: int, sps) -> np.ndarray:
    """R * E[tau(l)] * SPS(R (1 + l)) for l = 0..gamma, from per-position acceptance p."""
    tau = 1 + np.concatenate([[0.0], np.cumsum(np.cumprod(p))])
    return r * tau * sps(r * (1 + np.arange(len(p) + 1)))


def test_goodput_cold_start_assumes_full_acceptance():
    sps = convex_latency(knee=20, base=4)
    got = Goodput().lengths(np.full((8, 5), 0.01), sps, None)
    assert got.tolist() == [int(np.argmax(goodput_objective(np.ones(5), 8, sps)))] * 8


def test_goodput_is_batch_argmax_of_measured_acceptance():
    rng = np.random.default_rng(3)
    sps = convex_latency(knee=20, base=4)
    policy = Goodput()
    tried, hits = np.zeros(5), np.zeros(5)
    for _ in range(10):  # rounds of 8 requests, each verifying 4 drafts
        lengths, accepted = np.full(8, 4), rng.integers(0, 5, 8)
        policy.observe(lengths, accepted)
        for j in range(1, 5):
            tried[j - 1] += (accepted >= j - 1).sum()
            hits[j - 1] += (accepted >= j).sum()
    p = hits / np.maximum(tried, 1)
    p[4] = p[3]  # position 5 never tried: it takes position 4's estimate
    np.testing.assert_allclose(policy.acceptance(5), p)
    conf = rng.uniform(0.4, 1.0, size=(8, 5))  # this round's confidences play no part
    got = policy.lengths(conf, sps, None)
    assert got.tolist() == [int(np.argmax(goodput_objective(p, 8, sps)))] * 8
    np.testing.assert_array_equal(policy.lengths(1 - conf, sps, None), got)


def test_goodput_window_forgets_old_rounds():
    policy = Goodput(window=3)
    for _ in range(5):
        policy.observe(np.full(4, 2), np.zeros(4, np.int64))
    for _ in range(3):
        policy.observe(np.full(4, 2), np.full(4, 2))
    np.testing.assert_allclose(policy.acceptance(2), [1.0, 1.0])


def test_goodput_sla_picks_the_best_length_that_meets_it():
    sps = convex_latency(knee=8, base=1)
    policy = Goodput(sla_tps=None)
    for _ in range(4):
        policy.observe(np.full(4, 5), np.array([0, 1, 2, 5]))
    p = policy.acceptance(5)
    speed = goodput_objective(p, 4, sps) / 4
    free = int(np.argmax(speed))
    sla = float(np.sort(speed)[-2]) if speed[0] < speed[free] else float(speed[free])
    meets = np.flatnonzero(speed >= sla)
    policy.sla_tps = sla
    assert policy.lengths(np.ones((4, 5)), sps, None)[0] == meets[np.argmax(speed[meets])]
    policy.sla_tps = 1e9  # no length meets it: the unconstrained choice, not l = 0
    assert policy.lengths(np.ones((4, 5)), sps, None)[0] == free


def test_dspark_async_uses_capacity_from_two_rounds_back():
    flat = lambda b: np.ones_like(np.asarray(b), dtype=float)  # noqa: E731
    steep = convex_latency(knee=0.5, slope=1.0)
    policy = DSparkAsync()
    conf = np.full((4, 5), 0.9)
    # rounds 1-2 have no capacity two rounds old: they schedule like dspark (early stop)
    np.testing.assert_array_equal(policy.lengths(conf, flat, None), dspark_lengths(conf, flat))
    np.testing.assert_array_equal(policy.lengths(conf, steep, None), dspark_lengths(conf, steep))
    third = policy.lengths(conf, steep, None)  # round 3 spends round 1's (flat) capacity
    assert third.sum() == 20
    assert policy.lengths(conf, steep, None).sum() == global_capacity(conf, steep)


@pytest.mark.parametrize(
    ("spec", "conf_row", "truth", "expected"),
    [
        ("ar", [0.9] * 4, [4], 0),
        ("mtp1", [0.9] * 4, [0], 1),
        ("fixed:3", [0.1] * 4, [4], 3),
        ("fixed:9", [0.1] * 4, [4], 4),
        ("oracle", [0.1] * 4, [2], 2),
    ],
)
def test_fixed_family_and_oracle(spec, conf_row, truth, expected):
    policy = parse_policy(spec)
    out = policy.lengths(np.array([conf_row]), None, np.array(truth))
    assert out.tolist() == [expected]
    assert policy.drafts == (spec != "ar")


def test_dspark_async_sla_stops_inside_its_budget():
    sps = convex_latency(knee=6, base=1)
    conf = np.full((4, 5), 0.9)
    free, capped = DSparkAsync(), DSparkAsync(sla_tps=1.8 * sps(np.array([4]))[0])
    for _ in range(3):
        a, b = free.lengths(conf, sps, None), capped.lengths(conf, sps, None)
    rows, survival = candidates(conf)
    speed = sps(4 + np.arange(len(rows) + 1))
    k = sla_stop(rows, survival, 4, int(a.sum()), speed, capped.sla_tps)
    assert 0 < b.sum() == k < a.sum()


def test_synchronous_flags():
    """Policies that need this round's confidences on the host before verifying."""
    sync = {s: parse_policy(s).synchronous for s in ("ar", "mtp1", "fixed:3", "threshold:0.5")}
    sync |= {s: parse_policy(s).synchronous for s in ("goodput", "dspark", "dspark-async")}
    assert sync == {
        "ar": False,
        "mtp1": False,
        "fixed:3": False,
        "threshold:0.5": True,
        "goodput": False,
        "dspark": True,
        "dspark-async": False,
    }


# -- the registry and the protocol's defaults ---------------------------------------------------
@pytest.mark.parametrize("spec", example_specs())
@pytest.mark.parametrize("sla", [None, 2.0])
def test_every_registered_name_parses_to_a_fresh_policy_with_every_trait(spec, sla):
    """Built-ins declare every trait themselves: none leans on the protocol's defaults."""
    policy = parse_policy(spec, sla)
    assert policy is not parse_policy(spec, sla)
    assert isinstance(policy.drafts, bool) and isinstance(policy.synchronous, bool)
    assert policy_traits(policy).synchronous == policy.synchronous


def test_names_come_from_the_registry():
    assert (*(entry.usage for entry in BUILT_INS), "MODULE:CLASS", "FILE.py:CLASS") == POLICY_NAMES
    assert policy_usage() == " | ".join(POLICY_NAMES)


@pytest.mark.parametrize("command", ["run", "check-policy"])
def test_help_lists_every_name(monkeypatch, capsys, command):
    monkeypatch.setenv("COLUMNS", "300")  # no wrapping inside the help's table
    code, out, _ = run_cli(monkeypatch, capsys, command, "--help")
    assert code == 0
    assert policy_usage() in out


@pytest.mark.parametrize("spec", ["bogus", "fixed:-1", "fixed:x", "dspark:Foo"])
def test_unknown_name_error_lists_every_name(spec):
    with pytest.raises(InputError) as err:
        parse_policy(spec)
    assert str(err.value).endswith(f"unknown policy {spec!r}; known: {', '.join(POLICY_NAMES)}")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("threshold:2", "policy threshold:2: h must be a finite number >= 0 and <= 1, got 2.0"),
        ("threshold:nan", "h must be a finite number >= 0 and <= 1, got nan"),
        ("threshold:x", "policy threshold:x: h must be a number, got 'x'"),
    ],
)
def test_a_threshold_outside_0_1_says_the_range_of_h(spec, message):
    with pytest.raises(InputError, match=re.escape(message)):
        parse_policy(spec)


def test_kinds_without_a_claim_on_their_prefix_leave_it_to_plug_ins():
    """`ar:X`, `mtp1:X` and `oracle:X` name a plug-in module `ar`, `mtp1` or `oracle`."""
    for kind in ("ar", "mtp1", "oracle"):
        with pytest.raises(InputError, match=f"cannot import '{kind}'"):
            parse_policy(f"{kind}:Policy")


@pytest.mark.parametrize("doc", ["README.md", "docs/policies.md", "docs/design.md"])
def test_docs_name_every_built_in(doc):
    text = (ROOT / doc).read_text()
    assert all(f"`{entry.usage}`" in text for entry in BUILT_INS)


def test_protocol_defaults_fill_in_what_a_policy_leaves_out():
    class Bare:
        drafts = True

        def lengths(self, conf, sps, truth):
            return np.zeros(conf.shape[0], np.int64)

    assert policy_traits(Bare()) == Traits(drafts=True, synchronous=True, observe=None)
    goodput = Goodput()
    assert policy_traits(goodput) == Traits(True, False, goodput.observe)


def test_policies_import_no_layer_above_them():
    """Counting imports inside functions: dsim.errors, the number checks, the spec grammar,
    dsim.tables (a leaf reading vllm-adaptive's cost file), dsim.codehash (a leaf that says
    which files are the user's), dsim.lab (a leaf naming the extra the chi-square test needs),
    dsim.size_gate (a leaf: check-policy's work is gated as every command's) and each other,
    plus the real sampling code for the checker's toy decoding (dsim/policies/__init__.py)."""
    shared = {"dsim.errors", "dsim.checks", "dsim.spec_grammar", "dsim.tables", "dsim.codehash"}
    shared |= {"dsim.lab", "dsim.size_gate"}
    allowed = shared | {"dsim.models.toy_decoder"}
    for path in (ROOT / "dsim" / "policies").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for name in names:
                if name.startswith("dsim") and not name.startswith("dsim.policies"):
                    assert name in allowed, f"{path.name} imports {name}"
                    assert name in shared or path.name == "check.py"
