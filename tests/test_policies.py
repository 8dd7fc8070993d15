"""Verification policies: optimality of the DSpark scheduler, edge cases, and its rivals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dsim.policies import (
    DSparkAsync,
    Goodput,
    Threshold,
    dspark_lengths,
    global_capacity,
    parse_policy,
)


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


@pytest.mark.parametrize("seed", range(30))
def test_sla_keeps_the_largest_prefix_where_every_request_meets_it(seed):
    rng = np.random.default_rng(seed)
    conf = rng.uniform(0.2, 1.0, size=(rng.integers(1, 6), 4))
    sps = convex_latency(knee=rng.uniform(1, 6), base=rng.uniform(0.5, 3))
    a = np.cumprod(conf, axis=1)
    free = dspark_lengths(conf, sps)

    def slowest(lengths):
        return (
            min(1 + a[r, : lengths[r]].sum() for r in range(len(lengths)))
            * sps(np.array([len(lengths) + lengths.sum()]))[0]
        )

    sla = rng.uniform(0.5, 1.5) * slowest(free)
    capped = dspark_lengths(conf, sps, sla_tps=sla)
    assert (capped <= free).all()
    assert capped.sum() == 0 or slowest(capped) >= sla
    # no longer prefix of the same candidate order (up to the free choice) meets the SLA
    order = np.argsort(-a.ravel(), kind="stable")
    for k in range(capped.sum() + 1, free.sum() + 1):
        lengths = np.bincount(order[:k] // 4, minlength=len(conf))
        assert slowest(lengths) < sla


def test_threshold_takes_longest_prefix_above_h():
    conf = np.array([[0.9, 0.9, 0.9], [0.5, 1.0, 1.0], [0.95, 0.99, 0.1]])
    np.testing.assert_array_equal(Threshold(0.8, "t").lengths(conf, None, None), [2, 0, 2])


def test_goodput_is_batch_argmax():
    rng = np.random.default_rng(3)
    conf = rng.uniform(0.4, 1.0, size=(8, 5))
    sps = convex_latency(knee=20, base=4)
    got = Goodput().lengths(conf, sps, None)
    assert len(set(got)) == 1
    values = [objective(conf, np.full(8, k), sps) for k in range(6)]
    assert got[0] == int(np.argmax(values))


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
