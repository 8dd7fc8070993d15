"""dspark's candidate selection as compiled loops: candidates ranked by prefix survival, the
expected-throughput curve and its first loss, and the verify lengths of a schedule.

At a round's few dozen candidates numpy's per-call overhead (cumprod, ravel, argsort, gathers,
cumsum, comparisons, bincount) costs far more than the work. These loops do the same float
operations in numpy's order (products and sums left to right, no `fastmath`), so a schedule is
bit for bit what numpy's calls gave; SPS(B) stays with the caller. Compiled once per machine
(`cache=True`), without the GIL.

Glossary:
- R: requests in the round; gamma: drafts per request; n: candidates with survival > 0.
- conf: [R, gamma] conditional confidences; survival a[r, j] = conf[r, 0] * ... * conf[r, j].
- rows, survival: [n] the candidates' requests and survivals, by survival descending (ties by
  flat index r * gamma + j: a stable sort).
- speed: [n + 1] SPS(R + k) for k = 0..n admitted candidates; theta: [n + 1] the expected
  tokens per second after k admissions, (R + survival[0] + ... + survival[k - 1]) * speed[k].
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def candidates(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates (r, j) with prefix survival a[r, j] > 0 (NaN dropped), by survival
    descending: their rows and survivals. conf: [R, gamma] float64; returns [n] int64 and [n]
    float64.

    Ties go by flat index (r, then j), so on exact ties (confidence 1.0) j comes before j + 1,
    every prefix of the order is a valid schedule, and the place of (r, j) in the order depends
    only on the candidates ahead of it, never on r's later confidences.
    """
    r_count, gamma = conf.shape
    flat = np.empty(r_count * gamma, np.int64)  # shape [R * gamma]: kept flat indices
    kept = np.empty(r_count * gamma)  # shape [R * gamma]: their survivals
    n = 0
    for r in range(r_count):
        a = 1.0
        for j in range(gamma):
            a = conf[r, j] if j == 0 else a * conf[r, j]  # numpy's cumprod, left to right
            if a > 0:
                flat[n] = r * gamma + j
                kept[n] = a
                n += 1
    order = np.argsort(-kept[:n], kind="mergesort")  # shape [n]; stable: ties by flat index
    rows = np.empty(n, np.int64)  # shape [n]
    survival = np.empty(n)  # shape [n]
    for i in range(n):
        rows[i] = flat[order[i]] // gamma
        survival[i] = kept[order[i]]
    return rows, survival


@njit(cache=True, nogil=True)
def gain_curve(survival: np.ndarray, r: int, speed: np.ndarray, theta: np.ndarray) -> int:
    """Write theta (see the module doc) and return the first k whose admission does not gain,
    theta[k + 1] <= theta[k] (n when every admission gains; NaN never stops).

    survival: [n] float64; speed: [n + 1] float64; theta: [n + 1] float64, written.
    """
    n = survival.shape[0]
    theta[0] = (0.0 + r) * speed[0]
    total, stop = 0.0, n
    for k in range(n):
        total = survival[k] if k == 0 else total + survival[k]  # numpy's cumsum, then + R
        theta[k + 1] = (total + r) * speed[k + 1]
        if stop == n and theta[k + 1] <= theta[k]:
            stop = k
    return stop


@njit(cache=True, nogil=True)
def to_lengths(rows: np.ndarray, r: int) -> np.ndarray:
    """The R verify lengths of a schedule: how many admitted candidates each request has.
    rows: [k] int64 (the admitted candidates' requests, each < r); returns [r] int64."""
    lengths = np.zeros(r, np.int64)  # shape [R]
    for i in range(rows.shape[0]):
        lengths[rows[i]] += 1
    return lengths
