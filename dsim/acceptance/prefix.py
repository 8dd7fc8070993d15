"""Accepted-prefix length per row: how many of a round's drafts lead their row accepted.

Draft j is accepted when its uniform draw is below its acceptance probability; a row's prefix
ends at its first rejection. At the engine's batch sizes (8 rows of 7 on average) any numpy
formulation (`cumprod(ok, axis=1).sum(axis=1)`, an `argmin` over a verdict buffer) costs far
more in per-call overhead than the comparisons, so this is one compiled loop over the rows: it
only compares, which keeps the verdicts exactly numpy's. Compiled once per machine
(`cache=True`), without `fastmath`.

Glossary: R rows (requests) of gamma drafts; uniform, prob: [R, gamma] float64 (a round's
uniform draws and true acceptance probabilities); the result: [R] int64.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def leading_accepted(uniform: np.ndarray, prob: np.ndarray) -> np.ndarray:
    """Per row, how many of its first entries have uniform < prob ([R] int64, a fresh array)."""
    rows, gamma = uniform.shape
    truth = np.empty(rows, np.int64)  # shape [R]
    for r in range(rows):
        t = gamma
        for j in range(gamma):
            if not uniform[r, j] < prob[r, j]:  # NaN rejects, as numpy's `less` does
                t = j
                break
        truth[r] = t
    return truth
