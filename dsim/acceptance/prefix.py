"""Accepted-prefix length per row: the number of leading True values of a round's verdicts.

`cumprod(ok, axis=1).sum(axis=1)` reduces along a short axis, which numpy does slowly for the
engine's small batches (it was the costliest line of a simulated round). Reading each row's
verdicts as the bits of a number and looking its leading run up in a table is one small
matrix-vector product and one gather, about 3x faster at gamma 7 and 10-100 rows.
"""

from __future__ import annotations

from functools import cache

import numpy as np

MAX_TABLE_BITS = 16  # a 65,536-entry table; longer rows take the cumulative route


@cache
def _table(width: int) -> tuple[np.ndarray, np.ndarray]:
    """Bit weights of a row's positions, and the leading-run length of every bit pattern."""
    codes = np.arange(1 << width)
    alive = np.ones(len(codes), dtype=bool)
    lead = np.zeros(len(codes), dtype=np.int64)
    for k in range(width):
        alive &= ((codes >> k) & 1).astype(bool)
        lead += alive
    return 1 << np.arange(width, dtype=np.int64), lead


def leading_true(ok: np.ndarray) -> np.ndarray:
    """Per row of the boolean matrix `ok`, how many of its first entries are all True."""
    if ok.shape[1] > MAX_TABLE_BITS:
        return np.logical_and.accumulate(ok, axis=1).sum(axis=1)
    weights, lead = _table(ok.shape[1])
    return lead[ok @ weights]
