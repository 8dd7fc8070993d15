"""A replica's running (decode) batch: a row per request, a column per counter, every column
reachable by name.

The rows are the first `size` rows of one preallocated [max_seqs, COLUMNS] int64 matrix
(`dsim.engine.round_kernels` lays out its columns: REQUEST, CONTEXT, LEFT, ORDER, ROUNDS,
VERIFIED, ACCEPTED, each stored as what it means). `RunningBatch` gives each column a named
view (`batch.context`, `batch.left`, ...), remade only when a row joins or leaves, so reading
one in a round costs an attribute lookup. A round's commit and KV growth are then one
compiled loop each over the matrix, whatever the batch size.

Chosen by measuring a decode round's bookkeeping (the commit and the KV growth's block count)
at 8, 16 and 64 rows, on the loaded 2-core VM: this matrix with compiled loops, 1.2-1.6 us; a
numpy structured array with the same loops over its fields, 1.0-1.9 us (the same within the
noise); one slotted record per request updated in a Python loop, 5, 10 and 33 us. The matrix
keeps the kernels on one plain [R, COLUMNS] int64 array; the views give it the names. Storing
each column as what it means (a round writes five columns, not two) costs nothing measurable:
a whole run's step (`benchmarks/bench_sim.py fixed:3`) took 0.97 of the relatively encoded
layout's CPU time, the median of 5 A B pairs (0.955-1.006).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dsim.engine.round_kernels import (
    ACCEPTED,
    COLUMNS,
    CONTEXT,
    LEFT,
    ORDER,
    REQUEST,
    ROUNDS,
    VERIFIED,
    commit_round,
    leave_rows,
)


class RunningBatch:
    """The decode batch's rows and their named column views ([size] int64 each):

    - request: the request's index in the workload;
    - context: tokens in its KV cache (prompt plus output emitted so far);
    - left: output tokens it still has to emit;
    - order: its admission order on the replica (the last admitted is preempted first);
    - rounds, verified, accepted: its decode rounds, drafts verified and drafts accepted.

    `matrix` is the [size, COLUMNS] block the compiled kernels work on; `context_total` the
    rows' summed context (the verify step's mean context is context_total / size).
    """

    def __init__(self, max_seqs: int) -> None:
        self._rows = np.zeros((max_seqs, COLUMNS), np.int64)
        self._gone = np.zeros(max_seqs, np.int64)  # requests leaving (`leave_rows` writes it)
        self._no_stop = np.zeros(max_seqs, bool)  # stop flags of a backend that flags none
        self._no_drafts = np.zeros(max_seqs, np.int64)  # plain decoding's lengths (read only)
        self.context_total = 0
        self._resize(0)

    def _resize(self, size: int) -> None:
        """The batch is rows[:size]; its views are made here, not every round."""
        self.size = size
        self.matrix = m = self._rows[:size]
        self.request, self.context, self.left = m[:, REQUEST], m[:, CONTEXT], m[:, LEFT]
        self.order, self.rounds = m[:, ORDER], m[:, ROUNDS]
        self.verified, self.accepted = m[:, VERIFIED], m[:, ACCEPTED]
        self.no_stop = self._no_stop[:size]  # [size] bool, all False
        self.no_drafts = self._no_drafts[:size]  # [size] int64, all 0

    def join(
        self, request: int, context: int, left: int, order: int, counters: Sequence[int]
    ) -> None:
        """A prefilled request joins as the last row, with its saved (rounds, verified,
        accepted) `counters`."""
        rounds, verified, accepted = counters
        self._rows[self.size] = (request, context, left, order, rounds, verified, accepted)
        self.context_total += context
        self._resize(self.size + 1)

    def commit(
        self,
        lengths: np.ndarray,
        emitted: np.ndarray,
        accepted: np.ndarray,
        stop: np.ndarray | None,
    ) -> tuple[int, int, int]:
        """One round's tokens into the rows (`round_kernels.commit_round`, `stop` None when
        the backend flags none): (tokens emitted, tokens end-of-sequence cut, rows done)."""
        flags = self.no_stop if stop is None else stop
        emitted_now, cut, done = commit_round(lengths, emitted, accepted, flags, self.matrix)
        self.context_total += emitted_now  # each row's context grows by what it emitted
        return emitted_now, cut, done

    def newest(self) -> int:
        """The row of the request admitted last (the one preemption takes first)."""
        return int(np.argmax(self.order))

    def leave(
        self,
        rows: np.ndarray,
        prompt_tokens: np.ndarray,
        counters: np.ndarray,
        generated: np.ndarray,
    ) -> np.ndarray:
        """Rows (a boolean mask) leave: their counters go to `counters` and `generated`
        (`Records`' arrays), the rest move up in order. Returns the requests that left (a view
        of a buffer the next leave rewrites)."""
        m = self.matrix
        gone, context = leave_rows(m, rows, prompt_tokens, counters, generated, self._gone)
        self.context_total -= context
        self._resize(self.size - gone)
        return self._gone[:gone]
