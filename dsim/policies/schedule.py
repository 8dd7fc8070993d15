"""The dspark scheduler's machinery: candidates by prefix survival, the expected-throughput
curve, the SLA stop, and Algorithm 1 on top (docs/design.md, The dspark scheduler).

Every function here is a prefix rule: what it decides for the i-th candidate depends only on
candidates 1..i, which keeps decoding lossless (docs/design.md, The losslessness rule).
"""

from __future__ import annotations

import numpy as np

from dsim.policies.candidate_kernels import candidates, gain_curve, to_lengths
from dsim.policies.protocol import SPS, ragged_penalty, sps_span, uniform_at

__all__ = [
    "candidates",
    "dspark_lengths",
    "global_capacity",
    "sla_stop",
    "throughput",
    "to_lengths",
]


def _first(mask: np.ndarray, default: int) -> int:
    """Index of the first True of a 1-D mask, else `default` (the uniform-level choice's few
    gamma + 1 levels: one argmax)."""
    if len(mask):
        i = int(mask.argmax())
        if mask[i]:
            return i
    return default


def _gains(sps: SPS, r: int, survival: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """SPS and expected tokens per second after admitting the first k candidates, and the
    first admission that does not gain."""
    speed = sps_span(sps, r, r + len(survival) + 1)
    theta = np.empty(len(survival) + 1)
    if len(speed) != len(theta):  # the compiled loop does not check its bounds
        raise ValueError(f"SPS gave {len(speed)} values for {len(theta)} batch sizes")
    return speed, theta, gain_curve(survival, r, speed, theta)


def throughput(sps: SPS, r: int, survival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round rate SPS and expected tokens per second after admitting the first k candidates."""
    speed, theta, _ = _gains(sps, r, survival)
    return speed, theta


def sla_stop(
    rows: np.ndarray, survival: np.ndarray, r: int, k: int, speed: np.ndarray, sla_tps: float | None
) -> int:
    """How many of the first k candidates to admit so that no admission takes a request that
    meets the SLA below it.

    Request r's expected speed after k admissions is tau_r(k) * SPS(R + k), tau_r = 1 + its
    admitted survivals; it meets the SLA when SPS(R + k) >= sla_tps / tau_r(k). Admission stops
    at the first candidate after which some request that met the SLA no longer does; requests
    that miss it already stop nothing, so an SLA no round can meet leaves Algorithm 1's
    schedule. A prefix rule: admitting candidate i depends only on candidates 1..i, which keeps
    decoding lossless (a cut that removes admitted candidates would let later ones decide).
    """
    if sla_tps is None or k == 0:
        return k
    rows, survival, speed = rows[:k], survival[:k], speed[: k + 1]
    if (np.diff(speed) > 0).any():
        return _sla_stop_dense(rows, survival, r, speed, sla_tps)
    # With SPS non-increasing in B, a request whose tau stays t over steps s..e-1 drops out at
    # the first step where SPS < sla/t, if it met the SLA at s and that step is before e.
    order = np.argsort(rows, kind="stable")
    grouped, gain = rows[order], survival[order]
    starts = np.r_[True, grouped[1:] != grouped[:-1]]
    rank = np.arange(k) - np.maximum.accumulate(np.where(starts, np.arange(k), 0))
    # Each request's tau summed in admission order, one request per row: the same floats as
    # the dense rule's, so the two paths agree bit for bit at the SLA's boundary (a difference
    # there would let the path taken, which depends on k, decide an admission).
    sums = np.zeros((r, int(rank.max()) + 2))
    sums[grouped, rank + 1] = gain
    sums = np.cumsum(sums, axis=1)
    tau, before = np.empty(k), np.empty(k)
    tau[order] = 1.0 + sums[grouped, rank + 1]  # tau of the admitted request after each admission
    before[order] = 1.0 + sums[grouped, rank]  # and before it
    ends = np.full(k, k + 1)  # the step of the same request's next admission
    same = ~starts[1:]
    ends[order[:-1][same]] = order[1:][same] + 1
    first = np.full(r, k + 1)
    first[grouped[starts]] = order[starts] + 1
    t = np.r_[np.ones(r), tau]
    s = np.r_[np.zeros(r, np.int64), np.arange(1, k + 1)]
    e = np.r_[first, ends]
    threshold = sla_tps / t
    out = np.searchsorted(-speed, -threshold, side="right")  # first step with SPS < sla/t
    inside = (speed[s] >= threshold) & (out < e)
    entry = (speed[:-1] >= sla_tps / before) & (speed[1:] < sla_tps / tau)
    drops = np.r_[out[inside], np.flatnonzero(entry) + 1]
    return min(k, int(drops.min()) - 1) if len(drops) else k


def _sla_stop_dense(
    rows: np.ndarray, survival: np.ndarray, r: int, speed: np.ndarray, sla_tps: float
) -> int:
    """`sla_stop` for any SPS: every request's tau at every step (O(k R) memory and time)."""
    k = len(rows)
    gain = np.zeros((k + 1, r))
    gain[np.arange(1, k + 1), rows] = survival
    meets = speed[:, None] >= sla_tps / (1.0 + np.cumsum(gain, axis=0))
    drops = np.flatnonzero((meets[:-1] & ~meets[1:]).any(axis=1))
    return int(drops[0]) if len(drops) else k


def dspark_lengths(conf: np.ndarray, sps: SPS, sla_tps: float | None = None) -> np.ndarray:
    """Greedy admission by prefix survival with early stop (docs/design.md, The dspark scheduler).

    Admits candidates in descending survival while the expected throughput tau * SPS(B) strictly
    improves and (with an SLA) no request meeting it falls below; the first failure stops the
    search, which keeps decoding lossless. Where the step would pay a ragged verify penalty and
    a uniform round is forecast to do better (`uniform_forecast`), whole levels instead
    (`uniform_level`): every request the same length.
    """
    r = conf.shape[0]
    if ragged_penalty(sps) and uniform_forecast(conf, sps):
        return np.full(r, uniform_level(conf, sps, sla_tps), dtype=np.int64)
    rows, survival = candidates(conf)
    speed, _, k = _gains(sps, r, survival)  # k: the first admission that does not gain
    return to_lengths(rows[: sla_stop(rows, survival, r, k, speed, sla_tps)], r)


def _levels(conf: np.ndarray, sps: SPS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uniform rounds l = 0..gamma: each request's tau_r(l) (R x gamma+1), the rate at the
    uniform price and the expected throughput sum_r tau_r(l) * SPS(R (1 + l))."""
    r, gamma = conf.shape
    survival = conf.cumprod(axis=1)
    survival = np.where(survival > 0, survival, 0.0)  # NaN and negatives count as nothing
    tau = 1.0 + np.concatenate([np.zeros((r, 1)), survival.cumsum(axis=1)], axis=1)
    speed = uniform_at(sps, r * (1 + np.arange(gamma + 1)))
    return tau, speed, tau.sum(axis=0) * speed


def uniform_level(conf: np.ndarray, sps: SPS, sla_tps: float | None = None) -> int:
    """Algorithm 1 over whole levels: every request verifies draft l while the expected
    throughput at the uniform price strictly improves and (with an SLA) no request meeting it
    falls below. Level l's admission depends on drafts 1..l only: a prefix rule."""
    tau, speed, theta = _levels(conf, sps)
    level = _first(theta[1:] <= theta[:-1], conf.shape[1])
    if sla_tps is not None and level:
        meets = tau[:, : level + 1] * speed[: level + 1] >= sla_tps
        level = _first((meets[:, :-1] & ~meets[:, 1:]).any(axis=0), level)
    return level


def uniform_forecast(conf: np.ndarray, sps: SPS) -> bool:
    """Whether a uniform round is forecast to beat a ragged one under this step's penalty.

    The forecast reads only the first drafts' confidences (survival a_{r,j} = c_{r,1}^j), so
    the choice of mode depends on nothing a draft's own value could move: each draft's
    verification still depends on drafts up to it alone (docs/design.md, Ragged verify)."""
    gamma = conf.shape[1]
    first = np.where(conf[:, :1] > 0, conf[:, :1], 0.0)
    guess = np.repeat(first, gamma, axis=1)  # conditional confidences: c_{r,1} at every j
    _, _, uniform = _levels(guess, sps)
    rows, survival = candidates(guess)
    _, theta = throughput(sps, guess.shape[0], survival)
    k = _first(theta[1:] <= theta[:-1], len(survival))
    return bool(uniform[_first(uniform[1:] <= uniform[:-1], gamma)] > theta[k])


def global_capacity(conf: np.ndarray, sps: SPS) -> int:
    """Number of candidates maximising tau * SPS(B) over all k (no early stop)."""
    _, survival = candidates(conf)
    _, theta = throughput(sps, conf.shape[0], survival)
    return int(np.argmax(theta))
