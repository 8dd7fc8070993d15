"""A plug-in verification policy that is NOT lossless: Algorithm 1 without its early stop.

It admits candidates in descending prefix survival up to the count that maximises expected
throughput over ALL counts (a global search on this round's confidences). The confidence of
draft j + 1 is computed from draft j, so the search lets draft j's value decide whether draft j
is verified, and the output distribution is biased. `dsim check-policy` catches it:

    dsim check-policy docs/examples/biased_policy.py:GlobalSearch

(exit code 1, with the smallest counterexample found). docs/policies.md explains the protocol.
"""

from __future__ import annotations

import numpy as np


class GlobalSearch:
    """The policy protocol: `drafts`, `synchronous` and `lengths(conf, sps, truth)`."""

    drafts = True  # it runs the drafter
    synchronous = True  # it reads this round's confidences on the host

    def __init__(self, sla_tps: float | None = None) -> None:
        self.sla_tps = sla_tps  # accepted and ignored

    def lengths(self, conf: np.ndarray, sps, truth: np.ndarray) -> np.ndarray:
        """conf: R x gamma float64; sps: B -> steps/s (vectorised); returns R int64 in 0..gamma."""
        r, gamma = conf.shape
        survival = np.cumprod(conf, axis=1).ravel()
        order = np.argsort(-survival, kind="stable")
        order = order[survival[order] > 0]
        tau = r + np.concatenate([[0.0], np.cumsum(survival[order])])
        theta = tau * sps(r + np.arange(len(order) + 1))
        best = int(np.argmax(theta))  # no early stop: later candidates decide earlier ones
        return np.bincount(order[:best] // gamma, minlength=r).astype(np.int64)
