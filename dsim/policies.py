"""Verification policies: each round, how many drafts each request verifies.

Definitions: docs/design.md, Verification policies and losslessness.

A policy is an object with `lengths(conf, sps, truth) -> int array` where `conf` is the batch's
R x gamma conditional confidences, `sps(B)` the steps per second of a round that verifies B tokens
(vectorised over B; it already includes the drafter and any prefill work of the step), and
`truth` the accepted prefix had all drafts been verified (only the oracle may look at it).
`drafts` says whether the policy runs the drafter at all (no drafter cost for `ar`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dsim.errors import InputError

SPS = Callable[[np.ndarray], np.ndarray] | np.ndarray


def _sps_at(sps: SPS, b: np.ndarray) -> np.ndarray:
    """Evaluate SPS at token counts `b`: a callable, or a table indexed by B."""
    return sps[b] if isinstance(sps, np.ndarray) else np.asarray(sps(b), dtype=np.float64)


def _candidates(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates (r, j) with prefix survival a[r, j] > 0, ordered by survival, descending.

    Survival never rises along a row; a relative nudge of 1e-12 per position makes it strictly
    fall, so even on exact ties (confidence 1.0) j comes before j + 1 and every prefix of the
    order is a valid schedule. (An unstable sort on the nudged keys is 3x faster than a stable
    one; ties across requests are broken arbitrarily but deterministically.)
    """
    a = np.cumprod(conf, axis=1)
    key = (a * (1.0 - 1e-12 * np.arange(conf.shape[1]))).ravel()
    order = np.argsort(-key)
    order = order[key[order] > 0]
    return order // conf.shape[1], a.ravel()[order]


def _theta(sps: SPS, r: int, survival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round rate SPS and expected tokens per second after admitting the first k candidates."""
    tau = r + np.concatenate([[0.0], np.cumsum(survival)])
    speed = _sps_at(sps, r + np.arange(len(survival) + 1))
    return speed, tau * speed


def _to_lengths(rows: np.ndarray, r: int) -> np.ndarray:
    return np.bincount(rows, minlength=r).astype(np.int64)


def _sla_cut(
    rows: np.ndarray, survival: np.ndarray, r: int, k: int, speed: np.ndarray, sla_tps: float | None
) -> int:
    """Largest k' <= k whose round keeps every request's expected speed >= sla_tps.

    Request r's expected speed is E[tau_r] * SPS(B) with E[tau_r] = 1 + its admitted
    survivals, so the SLA caps the round latency at min_r E[tau_r] / sla_tps. Candidates are
    dropped from the lowest survival up; each pass jumps to the largest k' meeting the cap of
    the current k (the cap only falls as k falls), so a few O(k) passes suffice. If even k' = 0
    misses the SLA, the round verifies nothing: the fastest round the hardware can do.
    """
    if sla_tps is None:
        return k
    while k > 0:
        cap = 1.0 + np.bincount(rows[:k], weights=survival[:k], minlength=r).min()
        fits = np.flatnonzero(speed[: k + 1] * cap >= sla_tps)
        if len(fits) and fits[-1] == k:
            return k
        k = int(fits[-1]) if len(fits) else 0
    return 0


def dspark_lengths(conf: np.ndarray, sps: SPS, sla_tps: float | None = None) -> np.ndarray:
    """Greedy admission by prefix survival with early stop (docs/design.md, The dspark scheduler).

    Admits candidates in descending survival while the expected throughput tau * SPS(B) strictly
    improves; the first non-improvement stops the search (this keeps decoding lossless).
    """
    r = conf.shape[0]
    rows, survival = _candidates(conf)
    speed, theta = _theta(sps, r, survival)
    worse = np.flatnonzero(np.diff(theta) <= 0)
    k = int(worse[0]) if len(worse) else len(survival)
    return _to_lengths(rows[: _sla_cut(rows, survival, r, k, speed, sla_tps)], r)


def global_capacity(conf: np.ndarray, sps: SPS) -> int:
    """Number of candidates maximising tau * SPS(B) over all k (no early stop)."""
    _, survival = _candidates(conf)
    _, theta = _theta(sps, conf.shape[0], survival)
    return int(np.argmax(theta))


@dataclass
class Fixed:
    """`ar` (K=0), `mtp1` (K=1) and `fixed:K`: the same length for every request."""

    k: int
    name: str

    @property
    def drafts(self) -> bool:
        return self.k > 0

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        return np.full(conf.shape[0], min(self.k, conf.shape[1]), dtype=np.int64)


@dataclass
class Threshold:
    """`threshold:h`: per request, the longest prefix whose survival is >= h."""

    h: float
    name: str
    drafts: bool = True

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        return (np.cumprod(conf, axis=1) >= self.h).sum(axis=1).astype(np.int64)


@dataclass
class Goodput:
    """`goodput`: one length for the whole batch, argmax_l sum_r E[tau_r(l)] * SPS(R (1 + l))."""

    name: str = "goodput"
    sla_tps: float | None = None
    drafts: bool = True

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        r, gamma = conf.shape
        tau_r = 1.0 + np.concatenate([np.zeros((r, 1)), np.cumsum(np.cumprod(conf, 1), 1)], 1)
        speed = _sps_at(sps, r * (1 + np.arange(gamma + 1)))
        theta = tau_r.sum(axis=0) * speed
        if self.sla_tps is not None:  # every request's expected speed must reach the SLA
            theta = np.where(tau_r.min(axis=0) * speed >= self.sla_tps, theta, -np.inf)
            theta[0] = max(theta[0], 0.0)
        return np.full(r, int(np.argmax(theta)), dtype=np.int64)


@dataclass
class DSpark:
    """`dspark`: Algorithm 1, synchronous with early stop."""

    name: str = "dspark"
    sla_tps: float | None = None
    drafts: bool = True

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        return dspark_lengths(conf, sps, self.sla_tps)


@dataclass
class DSparkAsync:
    """`dspark-async`: capacity from confidences two rounds old, spent on current top candidates.

    The global search (no early stop) runs on the batch of round t-2; its capacity per request
    times the current batch size gives this round's token budget K, which goes to the K
    candidates with the highest current survival. Until a capacity two rounds old exists (the
    first two rounds) it schedules like `dspark`: a global search on current confidences would
    let the choice depend on the drafted tokens and bias the output (docs/design.md, The
    losslessness rule).
    """

    name: str = "dspark-async"
    sla_tps: float | None = None
    drafts: bool = True
    _history: deque = field(default_factory=lambda: deque(maxlen=3))

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        r = conf.shape[0]
        self._history.append(global_capacity(conf, sps) / r)
        if len(self._history) < 3:
            return dspark_lengths(conf, sps, self.sla_tps)
        rows, survival = _candidates(conf)
        k = min(len(survival), int(round(self._history[0] * r)))
        if self.sla_tps is not None:
            speed = _sps_at(sps, r + np.arange(k + 1))
            k = _sla_cut(rows, survival, r, k, speed, self.sla_tps)
        return _to_lengths(rows[:k], r)


@dataclass
class Oracle:
    """`oracle`: verifies exactly the drafts that will be accepted (a clairvoyant bound)."""

    name: str = "oracle"
    drafts: bool = True

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        return np.minimum(truth, conf.shape[1]).astype(np.int64)


POLICY_NAMES = (
    "ar",
    "mtp1",
    "fixed:K",
    "threshold:h",
    "goodput",
    "dspark",
    "dspark-async",
    "oracle",
)


def parse_policy(spec: str, sla_tps: float | None = None):
    """A fresh policy object (policies may keep per-run state) from its name."""
    kind, _, arg = spec.partition(":")
    try:
        if kind in ("ar", "mtp1") and not arg:
            return Fixed(0 if kind == "ar" else 1, spec)
        if kind == "fixed" and int(arg) >= 0:
            return Fixed(int(arg), spec)
        if kind == "threshold" and 0.0 <= float(arg) <= 1.0:
            return Threshold(float(arg), spec)
    except ValueError:
        pass
    simple = {"goodput": Goodput, "dspark": DSpark, "dspark-async": DSparkAsync}
    if kind in simple and not arg:
        return simple[kind](sla_tps=sla_tps)
    if spec == "oracle":
        return Oracle()
    raise InputError(None, None, f"unknown policy {spec!r}; known: {', '.join(POLICY_NAMES)}")
