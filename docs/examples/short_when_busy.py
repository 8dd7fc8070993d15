"""A lossless plug-in policy (README, "Answer a question"): every draft while the batch is
small, two drafts a request once it is large. The lengths never read the confidences, so no
draft's value can decide whether it is verified; `dsim check-policy` confirms it:

    dsim check-policy docs/examples/short_when_busy.py:ShortWhenBusy
"""

from __future__ import annotations

import numpy as np


class ShortWhenBusy:
    """The policy protocol: `drafts`, `synchronous` and `lengths(conf, sps, truth)`."""

    drafts = True  # it runs the drafter
    synchronous = False  # it never reads this round's confidences on the host

    def __init__(self, sla_tps: float | None = None) -> None:
        self.sla_tps = sla_tps  # accepted, not used

    def lengths(self, conf: np.ndarray, sps, truth: np.ndarray) -> np.ndarray:
        """conf: R x gamma; returns R int64 in 0..gamma."""
        r, gamma = conf.shape
        return np.full(r, gamma if r <= 8 else min(2, gamma), dtype=np.int64)
