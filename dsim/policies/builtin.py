"""The built-in verification policies (the README's `--policy` list; docs/design.md's table).

Each declares every trait of the protocol (`drafts`, `synchronous`, `observe` where it learns
from outcomes), so none depends on the protocol's defaults. Lossless rule: for every policy but
the oracle, whether draft j of a request is verified never depends on that request's
confidences of drafts j+1..gamma (they are computed from draft j).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from dsim.policies.protocol import SPS, sps_span, uniform_at
from dsim.policies.schedule import (
    candidates,
    dspark_lengths,
    global_capacity,
    sla_stop,
    to_lengths,
)


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
        speed = tau * uniform_at(sps, r * (1 + np.arange(gamma + 1)))
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
        rows, survival = candidates(conf)
        k = min(len(survival), int(round(self._history[0] * r)))
        if self.sla_tps is not None:
            speed = sps_span(sps, r, r + k + 1)
            k = sla_stop(rows, survival, r, k, speed, self.sla_tps)
        return to_lengths(rows[:k], r)


@dataclass
class Oracle:
    """`oracle`: verifies exactly the drafts that will be accepted (a clairvoyant bound)."""

    name: str = "oracle"
    drafts: bool = True
    synchronous: bool = False

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray) -> np.ndarray:
        return np.minimum(truth, conf.shape[1]).astype(np.int64)
