"""Per-request results of a run: one row per request of the workload, written by whichever
replica holds the request (in a cluster every replica writes into the same records)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dsim.workload import Workload

# The per-request table's columns (requests.parquet), in order.
REQUEST_COLUMNS = (
    "request_id",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "rounds",
    "verified_drafts",
    "accepted_drafts",
    "preemptions",
    "replica",
)

# Columns of `Records.counters`, in the order of the batch matrix's counter columns.
ROUNDS, VERIFIED, ACCEPTED = range(3)


@dataclass
class Records:
    """What the engine hands back: counts, times and the replica of every request."""

    generated: np.ndarray  # output tokens emitted so far
    first_token: np.ndarray  # time of the first output token (NaN until then)
    finish: np.ndarray  # time of the last output token (NaN until then)
    counters: np.ndarray  # (n, 3): decode rounds, drafts verified, drafts accepted
    preemptions: np.ndarray
    replica: np.ndarray  # the replica that emitted the request's last token
    finished: int = 0
    on_finish: Callable[[int, float], None] | None = None  # told (how many finished, when)
    sent: np.ndarray | None = None  # closed loop: each request's send time (its arrival)

    def count_finished(self, count: int, at: float) -> None:
        """Count `count` requests finished at time `at`; tell the closed-loop client, if any."""
        self.finished += count
        if self.on_finish is not None:
            self.on_finish(count, at)

    @classmethod
    def empty(cls, n: int) -> Records:
        return cls(
            np.zeros(n, np.int64),
            np.full(n, np.nan),
            np.full(n, np.nan),
            np.zeros((n, 3), np.int64),
            np.zeros(n, np.int64),
            np.zeros(n, np.int64),
        )

    def table(self, workload: Workload) -> pd.DataFrame:
        """The requests table (requests.parquet)."""
        return pd.DataFrame(
            {
                "request_id": np.arange(len(workload), dtype=np.int64),
                "arrival_s": workload.arrival_s if self.sent is None else self.sent,
                "first_token_s": self.first_token,
                "finish_s": self.finish,
                "prompt_tokens": workload.prompt_tokens,
                "output_tokens": self.generated,
                "rounds": self.counters[:, ROUNDS],
                "verified_drafts": self.counters[:, VERIFIED],
                "accepted_drafts": self.counters[:, ACCEPTED],
                "preemptions": self.preemptions,
                "replica": self.replica,
            },
            columns=list(REQUEST_COLUMNS),
        )
