"""The decode round's per-row arithmetic as compiled loops: the simulated verify, the round's
commit, its KV growth and rows leaving the batch (the accepted prefixes are
`dsim.acceptance.prefix`'s); and the layout of the running-batch matrix they work on
(`dsim.engine.batch.RunningBatch` gives its columns names).

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
- kv_pad: tokens added to a row's context so that (context + kv_pad) // block_size is the KV
  blocks its next round needs (`Replica.kv_pad`: the round's lookahead plus the ceiling's
  block_size - 1).
- stop: rows whose emitted tokens end on an end-of-sequence token (a real backend's flags).
- batch: [R, COLUMNS] int64, the running batch's rows (columns below).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Columns of the running-batch matrix, one counter per column, each stored as what it means
# (a round writes CONTEXT, LEFT, ROUNDS, VERIFIED and ACCEPTED of every row; in a compiled loop
# a store costs next to nothing). The last three are, in order, `Records.counters`' columns.
REQUEST = 0  # the request's index in the workload
CONTEXT = 1  # tokens in its KV cache: prompt plus output emitted so far
LEFT = 2  # output tokens it still has to emit (its output cap minus what it emitted)
ORDER = 3  # its admission order on the replica (the last admitted is preempted first)
ROUNDS = 4  # decode rounds it took part in
VERIFIED = 5  # drafts it verified
ACCEPTED = 6  # drafts it accepted (a round cut by the output cap still counts all it accepted)
COLUMNS = 7


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
    accepted: np.ndarray,
    stop: np.ndarray,
    batch: np.ndarray,
) -> tuple[int, int, int]:
    """One round's tokens into the batch's counters, with the output cap and end-of-sequence
    cut: (tokens emitted, tokens an end-of-sequence token cut from the rows' outputs, rows done).
    A row emits min(emitted, left) tokens; one flagged in `stop` ends with them (LEFT 0).

    lengths, emitted, accepted: [R] int64; stop: [R] bool (all False when the backend flags
    none); batch: [R, COLUMNS] int64, its CONTEXT, LEFT, ROUNDS, VERIFIED and ACCEPTED updated
    in place.
    """
    emitted_total, cut_total, done = 0, 0, 0
    for r in range(lengths.shape[0]):
        left = batch[r, LEFT]
        e = min(emitted[r], left)
        if stop[r]:  # the request ends with this round; its context stays what it emitted
            cut_total += left - e
            left = e
        emitted_total += e
        batch[r, CONTEXT] += e
        batch[r, LEFT] = left - e
        batch[r, ROUNDS] += 1
        batch[r, VERIFIED] += lengths[r]
        batch[r, ACCEPTED] += accepted[r]
        if left == e:
            done += 1
    return emitted_total, cut_total, done


@njit(cache=True, nogil=True)
def row_blocks(context: np.ndarray, kv_pad: int, block_size: int, need: np.ndarray) -> int:
    """need[r] = the KV blocks row r needs for its next round, (context + kv_pad) // block_size;
    returns their total.

    context: [R] int64; need: [R] int64, written.
    """
    total = 0
    for r in range(context.shape[0]):
        blocks = (context[r] + kv_pad) // block_size
        need[r] = blocks
        total += blocks
    return total


@njit(cache=True, nogil=True)
def leave_rows(
    batch: np.ndarray,
    leaving: np.ndarray,
    prompt_tokens: np.ndarray,
    counters: np.ndarray,
    generated: np.ndarray,
    ids: np.ndarray,
) -> tuple[int, int]:
    """Rows flagged in `leaving` leave the batch: their counters go to the records, the other
    rows move up in order. Returns (rows that left, their total context).

    batch: [R, COLUMNS] int64, compacted in place (its first R - left rows are the batch after);
    leaving: [R] bool; prompt_tokens: [N] int64 per request; counters: [N, 3] int64 (rounds,
    verified, accepted drafts) and generated: [N] int64 per request, written for the rows that
    leave; ids: [>= R] int64, written: the requests that left, in batch order.
    """
    kept, gone, context_total = 0, 0, 0
    for r in range(batch.shape[0]):
        if leaving[r]:
            i = batch[r, REQUEST]
            context = batch[r, CONTEXT]
            counters[i, 0] = batch[r, ROUNDS]
            counters[i, 1] = batch[r, VERIFIED]
            counters[i, 2] = batch[r, ACCEPTED]
            generated[i] = context - prompt_tokens[i]
            context_total += context
            ids[gone] = i
            gone += 1
        else:
            if kept < r:
                batch[kept, :] = batch[r, :]
            kept += 1
    return gone, context_total
