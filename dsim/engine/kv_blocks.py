"""A replica's paged KV cache as block counts: the pool, what queued-for-prefill requests hold,
and the running batch's blocks row by row.

Glossary:
- block: `block_size` tokens of KV; a request holds ceil(tokens / block_size) of them.
- held: blocks of requests admitted but not in the decode batch (prefilling), counted in `used`.
- rows: blocks of each decode-batch row, in batch order (`rows_total` is their sum).

Invariants (tests/engine/test_kv_blocks.py): 0 <= used <= capacity; used - rows_total is what the
non-batch holders hold (>= 0); rows_total == rows.sum(); a refused request changes nothing.
A row's blocks never shrink while it stays in the batch, since its context only grows.
Choosing whom to preempt is the replica's rule, not the allocator's.
"""

from __future__ import annotations

import numpy as np

from dsim.engine.round_kernels import row_blocks

SHORT = 100  # below this many rows, summing a Python list beats a numpy reduction's overhead


def total(x: np.ndarray) -> int:
    """Sum of a short int array, fast for the engine's typical batches."""
    return sum(x.tolist()) if len(x) < SHORT else int(x.sum())


class KvBlocks:
    """Admit, reserve, release and free KV blocks of one replica (see the module doc)."""

    def __init__(self, kv_tokens: int, block_size: int) -> None:
        self.capacity = kv_tokens // block_size
        self.block_size = block_size
        self.used = 0
        self.rows = np.zeros(0, np.int64)  # shape [running]: blocks each batch row holds
        self._need = np.zeros(0, np.int64)  # shape [running]: a round's need, before it fits
        self.rows_total = 0

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def blocks_for(self, tokens: int | np.ndarray) -> int | np.ndarray:
        """Blocks that hold `tokens` tokens (each of an array's entries)."""
        return -(-tokens // self.block_size)

    def admit(self, blocks: int) -> bool:
        """Take `blocks` for a request leaving the queue; False (nothing taken) if they do not
        fit."""
        if self.used + blocks > self.capacity:
            return False
        self.used += blocks
        return True

    def reserve_rows(self, context: np.ndarray, kv_pad: int) -> bool:
        """Grow the batch rows to floor((context + kv_pad) / block_size) blocks each (a round's
        need: `kv_pad` adds the round's lookahead and carries the ceiling's block_size - 1;
        context: [running]). False, with nothing changed, when the growth does not fit: the
        caller preempts a row and asks again."""
        need = self._need
        if len(need) != len(context):
            need = np.empty(len(context), np.int64)
        grow = row_blocks(context, kv_pad, self.block_size, need) - self.rows_total
        if grow == 0:
            return True
        if self.used + grow > self.capacity:
            self._need = need
            return False
        self.rows, self._need = need, self.rows  # the old rows' buffer is the next scratch
        self.used += grow
        self.rows_total += grow
        return True

    def join_row(self, blocks: int) -> None:
        """A held request (its blocks already in `used`) joins the batch as its last row."""
        self.rows = np.append(self.rows, blocks)
        self.rows_total += blocks

    def free_rows(self, leaving: np.ndarray) -> None:
        """Batch rows (a boolean mask over the rows) leave and free their blocks."""
        blocks = total(self.rows[leaving])
        self.used -= blocks
        self.rows_total -= blocks
        self.rows = self.rows[~leaving]

    def release(self, blocks: int) -> None:
        """A held (non-batch) request frees its blocks."""
        self.used -= blocks
