"""Verification policies (DESIGN.md 2): each round, how many drafts each request verifies.

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

    The stable sort of the row-major flattening keeps j before j+1 on ties, so every prefix of
    the order is prefix-closed per request: taking the first k candidates is a valid schedule.
    """
    a = np.cumprod(conf, axis=1).ravel()
    order = np.argsort(-a, kind="stable")
    order = order[a[order] > 0]
    return order // conf.shape[1], a[order]


def _theta(sps: SPS, r: int, survival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expected tokens and tokens-per-second after admitting the first k candidates, k = 0..n."""
    tau = r + np.concatenate([[0.0], np.cumsum(survival)])
    speed = _sps_at(sps, r + np.arange(len(survival) + 1))
    return tau, tau * speed


def _to_lengths(rows: np.ndarray, r: int) -> np.ndarray:
    return np.bincount(rows, minlength=r).astype(np.int64)


def _sla_cut(tau: np.ndarray, theta: np.ndarray, r: int, k: int, sla_tps: float | None) -> int:
    """Trim the lowest-survival candidates until expected per-user speed tau/R * SPS >= sla_tps.

    Expected per-user speed of a round admitting k candidates is theta[k] / R (tokens per
    request per second). Keep the largest k' <= k that meets the SLA; if none does, the k' <= k
    with the highest per-user speed (the best the hardware can do).
    """
    if sla_tps is None:
        return k
    per_user = theta[: k + 1] / r
    ok = np.flatnonzero(per_user >= sla_tps)
    return int(ok[-1]) if len(ok) else int(np.argmax(per_user))


def dspark_lengths(conf: np.ndarray, sps: SPS, sla_tps: float | None = None) -> np.ndarray:
    """Algorithm 1 (DESIGN.md 2): greedy admission by prefix survival with early stop.

    Admits candidates in descending survival while the expected throughput tau * SPS(B) strictly
    improves; the first non-improvement stops the search (this keeps decoding lossless).
    """
    r = conf.shape[0]
    rows, survival = _candidates(conf)
    tau, theta = _theta(sps, r, survival)
    worse = np.flatnonzero(np.diff(theta) <= 0)
    k = int(worse[0]) if len(worse) else len(survival)
    return _to_lengths(rows[: _sla_cut(tau, theta, r, k, sla_tps)], r)


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
        tau = r + np.concatenate([[0.0], np.cumsum(np.cumprod(conf, axis=1).sum(axis=0))])
        theta = tau * _sps_at(sps, r * (1 + np.arange(gamma + 1)))
        best = _sla_cut(tau, theta, r, gamma, self.sla_tps) if self.sla_tps else int(np.argmax(theta))
        return np.full(r, best, dtype=np.int64)


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
    candidates with the highest current survival. The first two rounds use their own search.
    """

    name: str = "dspark-async"
    sla_tps: float | None = None
    drafts: bool = True
    _history: deque = field(default_factory=lambda: deque(maxlen=3))

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        r = conf.shape[0]
        self._history.append(global_capacity(conf, sps) / r)
        per_request = self._history[0]
        rows, survival = _candidates(conf)
        k = min(len(survival), int(round(per_request * r)))
        if self.sla_tps is not None:
            tau, theta = _theta(sps, r, survival)
            k = _sla_cut(tau, theta, r, k, self.sla_tps)
        return _to_lengths(rows[:k], r)


@dataclass
class Oracle:
    """`oracle`: verifies exactly the drafts that will be accepted (a clairvoyant bound)."""

    name: str = "oracle"
    drafts: bool = True

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        return np.minimum(truth, conf.shape[1]).astype(np.int64)


POLICY_NAMES = ("ar", "mtp1", "fixed:K", "threshold:h", "goodput", "dspark", "dspark-async", "oracle")


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
