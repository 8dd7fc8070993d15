"""The compiled round and dspark's compiled candidate selection against their plain numpy
definitions, bit for bit (exact equality of every float), on random batches with ties, zeros
and NaN confidences, output caps and end-of-sequence flags."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsim.engine.round_kernels import (
    ACCEPTED,
    COLUMNS,
    CONTEXT,
    LEFT,
    ORDER,
    REQUEST,
    ROUNDS,
    VERIFIED,
    commit_round,
    leave_rows,
    row_blocks,
    simulated_verify,
)
from dsim.policies.candidate_kernels import candidates, gain_curve, to_lengths

# Confidences drawn from a few values so that survivals tie often; 0 and NaN are dropped.
VALUES = (0.0, 0.25, 0.5, 0.5, 0.9, 1.0, 1.0, float("nan"))


def batch(seed: int, rows: int, gamma: int, ties: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ties:
        return rng.choice(VALUES, size=(rows, gamma))
    return rng.random((rows, gamma))


def plain_candidates(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The definition: survivals > 0, by survival descending, ties by flat index."""
    a = np.cumprod(conf, axis=1).ravel()
    keep = np.flatnonzero(a > 0)
    order = keep[np.argsort(-a[keep], kind="stable")]
    return order // max(conf.shape[1], 1), a[order]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_candidates_are_the_stable_ranking_of_positive_survivals(seed, ties):
    rows, gamma = 1 + seed % 9, seed % 8  # gamma 0 included
    conf = batch(seed, rows, gamma, ties)
    got, want = candidates(conf), plain_candidates(conf)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1].tobytes() == want[1].tobytes()  # the same floats, bit for bit
    assert got[0].dtype == np.int64


@pytest.mark.parametrize("seed", range(30))
def test_gain_curve_is_numpys_cumsum_times_speed_and_its_first_loss(seed):
    rng = np.random.default_rng(seed)
    n, r = seed % 12, 1 + seed % 5
    survival = np.sort(rng.random(n))[::-1].copy()
    speed = 1.0 / (1.0 + 0.05 * np.arange(r, r + n + 1)) + rng.normal(0, 0.01, n + 1)
    theta = np.empty(n + 1)
    k = gain_curve(survival, r, speed, theta)
    tau = np.empty(n + 1)
    tau[0] = 0.0
    survival.cumsum(out=tau[1:])
    want = (tau + r) * speed
    assert theta.tobytes() == want.tobytes()
    losses = np.flatnonzero(want[1:] <= want[:-1])
    assert k == (losses[0] if len(losses) else n)


@given(st.lists(st.integers(0, 6), max_size=40), st.integers(1, 8))
def test_to_lengths_counts_each_requests_candidates(rows, r):
    rows = np.array([x % r for x in rows], np.int64)
    np.testing.assert_array_equal(to_lengths(rows, r), np.bincount(rows, minlength=r))


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=20))
def test_simulated_verify_accepts_the_shorter_of_truth_and_length(pairs):
    truth, lengths = (np.array(c, np.int64) for c in zip(*pairs, strict=True))
    emitted, accepted = simulated_verify(truth, lengths)
    np.testing.assert_array_equal(accepted, np.minimum(truth, lengths))
    np.testing.assert_array_equal(emitted, accepted + 1)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 7), st.integers(0, 7), st.integers(1, 20), st.booleans(), st.integers()
        ),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
def test_commit_round_caps_cuts_and_counts_as_the_plain_definition(rows, with_stop):
    lengths, accepted, left, stop, acc = (np.array(c) for c in zip(*rows, strict=True))
    lengths, accepted, left = (x.astype(np.int64) for x in (lengths, accepted, left))
    acc = acc % 1000
    emitted = accepted + 1
    stop = stop if with_stop else np.zeros(len(rows), bool)
    b = np.zeros((len(rows), COLUMNS), np.int64)
    b[:, LEFT], b[:, CONTEXT], b[:, ACCEPTED] = left, 1000, acc
    b[:, REQUEST], b[:, ROUNDS] = np.arange(len(rows)), 5
    before = b.copy()
    got = commit_round(lengths, emitted, accepted, stop, b)
    emit = np.minimum(emitted, left)
    cut = np.where(stop, left - emit, 0)
    after = np.where(stop, 0, left - emit)
    assert got == (emit.sum(), cut.sum(), np.count_nonzero(after == 0))
    np.testing.assert_array_equal(b[:, LEFT], after)
    np.testing.assert_array_equal(b[:, CONTEXT], 1000 + emit)  # the context grows by what it emits
    np.testing.assert_array_equal(b[:, ROUNDS], 6)
    np.testing.assert_array_equal(b[:, VERIFIED], lengths)
    np.testing.assert_array_equal(b[:, ACCEPTED], acc + accepted)  # the cap cuts no count
    untouched = [REQUEST, ORDER]
    np.testing.assert_array_equal(b[:, untouched], before[:, untouched])


@given(st.lists(st.booleans(), min_size=1, max_size=12), st.integers(0, 50))
def test_leave_rows_saves_the_counters_and_keeps_the_rest_in_order(leaving, seed):
    r, n = len(leaving), 40
    rng = np.random.default_rng(r * 100 + seed)
    b = rng.integers(0, 100, size=(r, COLUMNS))
    b[:, REQUEST] = rng.choice(n, size=r, replace=False)
    prompt = rng.integers(1, 50, size=n)
    context = prompt[b[:, REQUEST]] + rng.integers(0, 30, size=r)
    b[:, CONTEXT] = context
    before, mask = b.copy(), np.array(leaving)
    counters, generated = np.zeros((n, 3), np.int64), np.zeros(n, np.int64)
    ids = np.full(r, -1, np.int64)
    gone, total = leave_rows(b, mask, prompt, counters, generated, ids)
    assert gone == mask.sum() and total == context[mask].sum()
    np.testing.assert_array_equal(ids[:gone], before[mask, REQUEST])
    np.testing.assert_array_equal(b[: r - gone], before[~mask])
    left = before[mask]
    np.testing.assert_array_equal(counters[left[:, REQUEST]], left[:, [ROUNDS, VERIFIED, ACCEPTED]])
    np.testing.assert_array_equal(
        generated[left[:, REQUEST]], context[mask] - prompt[left[:, REQUEST]]
    )


@given(
    st.lists(st.integers(0, 10**6), min_size=1, max_size=20),
    st.integers(0, 500),
    st.sampled_from([1, 5, 16, 64]),
)
def test_row_blocks_floors_each_rows_padded_tokens(rows, kv_pad, block_size):
    context = np.array(rows, np.int64)
    need = np.empty(len(rows), np.int64)
    assert row_blocks(context, kv_pad, block_size, need) == ((context + kv_pad) // block_size).sum()
    np.testing.assert_array_equal(need, (context + kv_pad) // block_size)
