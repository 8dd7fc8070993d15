"""The decode round's per-row arithmetic as compiled loops: the simulated verify, the round's
commit and its KV growth (the accepted prefixes are `dsim.acceptance.prefix`'s).

At the engine's batch sizes (about 8 rows of 7 drafts) a numpy call costs far more than the
arithmetic it does, so each of these replaces several of them with one loop over the rows.
They do only comparisons, integer work and sequential sums; the random draws, exp/log and
floating-point reductions stay with numpy and scipy, which keeps every result bit for bit what
numpy's calls gave. Compiled once per machine (`cache=True` keeps the machine code on disk,
next to this file's `__pycache__`), without `fastmath`, and without the GIL.

Glossary:
- R: rows of the running batch; gamma: drafts per row.
- truth: per row, the accepted prefix had every draft been verified.
- lengths: drafts each row verifies this round; accepted = min(truth, lengths), and a simulated
  row emits accepted + 1 tokens (the target's own token after the last accepted draft).
- left: output tokens a row still has to emit (0: the request ends with this round).
- kv_end, pad: a row's context is kv_end - pad - left, so (kv_end - left) // block_size is
  the KV blocks its next round needs (`Replica.pad` carries the ceiling).
- stop: rows whose emitted tokens end on an end-of-sequence token (a real backend's flags).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def simulated_verify(truth: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(emitted, accepted) of a simulated round: accepted = min(truth, lengths) and emitted =
    accepted + 1, row by row, in fresh arrays (a backend serves every replica of a cluster,
    and each keeps its round's arrays until its step ends).

    truth, lengths: [R] int64; returns two [R] int64 arrays.
    """
    rows = truth.shape[0]
    emitted = np.empty(rows, np.int64)  # shape [R]
    accepted = np.empty(rows, np.int64)  # shape [R]
    for r in range(rows):
        a = min(truth[r], lengths[r])
        accepted[r] = a
        emitted[r] = a + 1
    return emitted, accepted


@njit(cache=True, nogil=True)
def commit_round(
    lengths: np.ndarray,
    emitted: np.ndarray,
    stop: np.ndarray,
    left: np.ndarray,
    kv_end: np.ndarray,
    verified: np.ndarray,
    emit: np.ndarray,
) -> tuple[int, int, int]:
    """One round's tokens into the batch's counters, with the output cap and end-of-sequence
    cut: (tokens emitted, tokens an end-of-sequence token cut from the rows' outputs, rows done).

    lengths, emitted: [R] int64; stop: [R] bool (all False when the backend flags none);
    left, kv_end, verified: [R] int64 views of the batch matrix's columns, updated in place;
    emit: [R] int64, written: min(emitted, left) before the round, the tokens it adds.
    """
    emitted_total, cut_total, done = 0, 0, 0
    for r in range(lengths.shape[0]):
        e = min(emitted[r], left[r])
        if stop[r]:  # the request ends with this round; its context stays what it emitted
            cut = left[r] - e
            cut_total += cut
            kv_end[r] -= cut
            left[r] = e
        emit[r] = e
        emitted_total += e
        left[r] -= e
        verified[r] += lengths[r]
        if left[r] == 0:
            done += 1
    return emitted_total, cut_total, done


@njit(cache=True, nogil=True)
def row_blocks(kv_end: np.ndarray, left: np.ndarray, block_size: int, need: np.ndarray) -> int:
    """need[r] = the KV blocks row r needs for its next round, (kv_end - left) // block_size;
    returns their total.

    kv_end, left: [R] int64; need: [R] int64, written.
    """
    total = 0
    for r in range(kv_end.shape[0]):
        blocks = (kv_end[r] - left[r]) // block_size
        need[r] = blocks
        total += blocks
    return total
