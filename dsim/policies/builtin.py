"""Verification policies: each round, how many drafts each request verifies.

Definitions: docs/design.md, Verification policies and losslessness.

A policy is an object with `lengths(conf, sps, truth) -> int array` where `conf` is the batch's
R x gamma conditional confidences, `sps(B)` the steps per second of a round that verifies B tokens
(vectorised over B; it already includes the drafter and any prefill work of the step), and
`truth` the accepted prefix had all drafts been verified (only the oracle may look at it).
`drafts` says whether the policy runs the drafter at all (no drafter cost for `ar`);
`synchronous` whether it needs this round's confidences on the host before the verify pass can
be launched (it then pays the engine's per-round scheduling cost); an optional
`observe(lengths, accepted)` receives each round's outcome. docs/policies.md has the protocol.

Lossless rule: for every policy but the oracle, whether draft j of a request is verified never
depends on that request's confidences of drafts j+1..gamma (they are computed from draft j).
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


def _sps_span(sps: SPS, start: int, stop: int) -> np.ndarray:
    """SPS at B = start..stop-1: a table's slice, the engine's `span`, or a plain callable."""
    if isinstance(sps, np.ndarray) and stop <= len(sps):  # a short table raises below
        return sps[start:stop]
    span = getattr(sps, "span", None)
    return span(start, stop) if span else _sps_at(sps, np.arange(start, stop))


def _first(mask: np.ndarray, default: int) -> int:
    """Index of the first True of a 1-D mask, else `default`: one argmax, cheaper than
    `np.flatnonzero` or `np.diff`'s Python wrappers at a round's few dozen candidates."""
    if len(mask):
        i = int(mask.argmax())
        if mask[i]:
            return i
    return default


def _candidates(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates (r, j) with prefix survival a[r, j] > 0, ordered by survival, descending.

    Ties go by flat index (r, then j), so on exact ties (confidence 1.0) j comes before j + 1,
    every prefix of the order is a valid schedule, and the place of (r, j) in the order depends
    only on the candidates ahead of it, never on r's later confidences. The fast unstable sort
    is kept when the positive survivals have no ties (the usual case); otherwise a stable one.
    """
    a = conf.cumprod(axis=1).ravel()
    keep = None if len(a) and a.min() > 0 else np.flatnonzero(a > 0)  # NaN: filtered too
    kept = a if keep is None else a[keep]  # usually every candidate (confidences > 0)
    order = (-kept).argsort()
    survival = kept[order]
    if _first(survival[1:] == survival[:-1], -1) >= 0:  # a tie
        order = np.argsort(-kept, kind="stable")
        survival = kept[order]
    if keep is not None:
        order = keep[order]
    return order // conf.shape[1], survival


def _theta(sps: SPS, r: int, survival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round rate SPS and expected tokens per second after admitting the first k candidates."""
    tau = np.empty(len(survival) + 1)
    tau[0] = 0.0
    survival.cumsum(out=tau[1:])
    tau += r
    speed = _sps_span(sps, r, r + len(survival) + 1)
    return speed, tau * speed


def _to_lengths(rows: np.ndarray, r: int) -> np.ndarray:
    return np.bincount(rows, minlength=r).astype(np.int64, copy=False)


def _sla_stop(
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
    total = np.cumsum(gain)
    before = (total - gain)[np.maximum.accumulate(np.where(starts, np.arange(k), 0))]
    tau = np.empty(k)
    tau[order] = 1.0 + total - before  # tau of the admitted request after each admission
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
    entry = (speed[:-1] >= sla_tps / (tau - survival)) & (speed[1:] < sla_tps / tau)
    drops = np.r_[out[inside], np.flatnonzero(entry) + 1]
    return min(k, int(drops.min()) - 1) if len(drops) else k


def _sla_stop_dense(
    rows: np.ndarray, survival: np.ndarray, r: int, speed: np.ndarray, sla_tps: float
) -> int:
    """`_sla_stop` for any SPS: every request's tau at every step (O(k R) memory and time)."""
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
    search, which keeps decoding lossless.
    """
    r = conf.shape[0]
    rows, survival = _candidates(conf)
    speed, theta = _theta(sps, r, survival)
    k = _first(theta[1:] <= theta[:-1], len(survival))  # the first admission that does not gain
    return _to_lengths(rows[: _sla_stop(rows, survival, r, k, speed, sla_tps)], r)


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
    synchronous: bool = False
    _made: dict = field(default_factory=dict, repr=False)  # (rows, gamma) -> lengths

    @property
    def drafts(self) -> bool:
        return self.k > 0

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        """The same array for every round of a batch size (the engine only reads it)."""
        shape = conf.shape
        if shape not in self._made:
            self._made[shape] = np.full(shape[0], min(self.k, shape[1]), dtype=np.int64)
        return self._made[shape]


@dataclass
class Threshold:
    """`threshold:h`: per request, the longest prefix whose survival is >= h.

    Synchronous: the host needs the lengths (this round's confidences) to size the verify pass.
    """

    h: float
    name: str
    drafts: bool = True
    synchronous: bool = True

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        return (np.cumprod(conf, axis=1) >= self.h).sum(axis=1).astype(np.int64)


def _plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b for int vectors of any lengths (the shorter one padded with zeros)."""
    if len(a) < len(b):
        a, b = b, a
    out = a.copy()
    out[: len(b)] += b
    return out


def _count_from(values: np.ndarray, gamma: int) -> np.ndarray:
    """For j = 1..gamma, how many of `values` are >= j."""
    return np.cumsum(np.bincount(values, minlength=gamma + 1)[::-1])[::-1][1 : gamma + 1]


@dataclass
class Goodput:
    """`goodput` (SmartSpec-style): one length l for the whole batch,
    argmax_l R * E[tau(l)] * SPS(R (1 + l)), with E[tau(l)] = 1 + sum_{j<=l} p_1 ... p_j from
    per-position acceptance p_j MEASURED over the batch's last `window` rounds.

    p_j = drafts accepted at position j / drafts tried there (verified, with drafts 1..j-1
    accepted), summed over the window (fed by `observe`). A position with no tries in the window
    takes p_{j-1} (p_0 = 1), so the cold start (no rounds yet) assumes acceptance 1 and picks
    the length the hardware pays for most. Nothing of this round's drafts enters the choice, so
    it is lossless and needs no host sync. With an SLA, l maximises throughput among the lengths
    whose expected per-request speed E[tau(l)] * SPS meets it; if none does, among all.
    """

    name: str = "goodput"
    sla_tps: float | None = None
    window: int = 32
    drafts: bool = True
    synchronous: bool = False
    _rounds: deque = field(default_factory=deque)
    _sums: list = field(default_factory=lambda: [np.zeros(0, np.int64)] * 2)  # over the window

    def acceptance(self, gamma: int) -> np.ndarray:
        """Measured p_1..p_gamma over the window (see the class doc)."""
        tried, accepted = (s[:gamma].tolist() for s in self._sums)
        p, prev = [], 1.0
        for j in range(gamma):
            if j < len(tried) and tried[j]:
                prev = accepted[j] / tried[j]
            p.append(prev)
        return np.array(p)

    def observe(self, lengths: np.ndarray, accepted: np.ndarray) -> None:
        gamma = int(lengths.max(initial=0))
        tried = _count_from(np.minimum(lengths, accepted + 1), gamma)
        counts = (tried, _count_from(accepted, gamma))
        self._rounds.append(counts)
        self._sums = [_plus(s, c) for s, c in zip(self._sums, counts, strict=True)]
        if len(self._rounds) > self.window:
            old = self._rounds.popleft()
            self._sums = [_plus(s, -c) for s, c in zip(self._sums, old, strict=True)]

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        r, gamma = conf.shape
        tau = 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(self.acceptance(gamma)))])
        speed = tau * _sps_at(sps, r * (1 + np.arange(gamma + 1)))
        ok = speed >= self.sla_tps if self.sla_tps is not None else np.ones(gamma + 1, bool)
        theta = np.where(ok if ok.any() else True, speed, -np.inf)
        return np.full(r, int(np.argmax(theta)), dtype=np.int64)


@dataclass
class DSpark:
    """`dspark`: Algorithm 1, synchronous with early stop."""

    name: str = "dspark"
    sla_tps: float | None = None
    drafts: bool = True
    synchronous: bool = True

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        return dspark_lengths(conf, sps, self.sla_tps)


@dataclass
class DSparkAsync:
    """`dspark-async`: capacity from confidences two rounds old, spent on current top candidates.

    The global search (no early stop) runs on the batch of round t-2; its capacity per request
    times the current batch size gives this round's token budget K, which goes to the first K
    candidates in current survival order (with an SLA, admission stops earlier at the first
    candidate that would take a request meeting it below, as in `dspark`). The host knows K
    before this round's confidences exist and the top-K pick runs on the device: no host sync.
    Until a capacity two rounds old exists (the first two rounds) it schedules like `dspark`: a
    global search on current confidences would let the choice depend on the drafted tokens and
    bias the output (docs/design.md, The losslessness rule).
    """

    name: str = "dspark-async"
    sla_tps: float | None = None
    drafts: bool = True
    synchronous: bool = False
    _history: deque = field(default_factory=lambda: deque(maxlen=3))

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        r = conf.shape[0]
        self._history.append(global_capacity(conf, sps) / r)
        if len(self._history) < 3:
            return dspark_lengths(conf, sps, self.sla_tps)
        rows, survival = _candidates(conf)
        k = min(len(survival), int(round(self._history[0] * r)))
        if self.sla_tps is not None:
            speed = _sps_span(sps, r, r + k + 1)
            k = _sla_stop(rows, survival, r, k, speed, self.sla_tps)
        return _to_lengths(rows[:k], r)


@dataclass
class Oracle:
    """`oracle`: verifies exactly the drafts that will be accepted (a clairvoyant bound)."""

    name: str = "oracle"
    drafts: bool = True
    synchronous: bool = False

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
    "MODULE:CLASS",
    "FILE.py:CLASS",
)


def parse_policy(spec: str, sla_tps: float | None = None):
    """A fresh policy object (policies may keep per-run state) from its name, or a plug-in
    `module.path:ClassName` / `file.py:ClassName` (docs/policies.md)."""
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
    target, _, cls = spec.rpartition(":")
    if target and cls.isidentifier() and kind not in ("fixed", "threshold", *simple):
        from dsim.policy_plugin import load_plugin

        return load_plugin(spec, sla_tps)
    raise InputError(None, None, f"unknown policy {spec!r}; known: {', '.join(POLICY_NAMES)}")
