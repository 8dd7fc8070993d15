"""The engine's per-step log, kept compact: six doubles a step in one growing typed buffer.

A Python tuple per step costs ~200 bytes of objects; an `array.array` of doubles grows in
amortised O(1) like a list but holds 48 bytes a step, and appending to it is cheaper than
writing a row of a preallocated numpy array.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

FIELDS = ("start_s", "latency_s", "num_running", "batch_tokens", "prefill_tokens", "kv_blocks_used")


@dataclass
class StepLog:
    """Per-step engine state, for invariants and load plots."""

    start_s: np.ndarray
    latency_s: np.ndarray
    num_running: np.ndarray
    batch_tokens: np.ndarray
    prefill_tokens: np.ndarray
    kv_blocks_used: np.ndarray


class StepRecorder:
    """Appends one step's six figures; counts are exact in a double up to 2**53."""

    def __init__(self) -> None:
        self._buf = array("d")
        self.count = 0

    def add(
        self, start: float, latency: float, running: int, tokens: int, prefill: int, kv: int
    ) -> None:
        self._buf.fromlist([start, latency, running, tokens, prefill, kv])
        self.count += 1

    def log(self) -> StepLog:
        cols = np.frombuffer(self._buf, dtype=np.float64).reshape(-1, len(FIELDS)).T.copy()
        return StepLog(cols[0], cols[1], *(c.astype(np.int64) for c in cols[2:]))
