"""What an acceptance source produces when served: per-position conditional acceptance and tau.

Each request draws rounds at full verification until it has emitted `tokens`, as in a serving
run, so a request that accepts less runs more rounds. Conditional acceptance at position k is
the share of rounds that reached draft k (drafts 1..k-1 accepted) and accepted it: the paper's
position-wise denominator. tau = all tokens / all rounds.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dsim.acceptance.sources import AcceptanceSource


class Served(NamedTuple):
    curve: np.ndarray  # conditional acceptance per position
    tau: float  # tokens per round, bonus included
    reached: np.ndarray  # rounds that reached each position (the curve's denominators)


def served_curve(
    source: AcceptanceSource, n_requests: int, tokens: int, rng: np.random.Generator
) -> Served:
    """The conditional curve, tau and rounds reaching each position, over served rounds."""
    gamma = source.gamma
    source.bind(n_requests, rng)
    emitted, active = np.zeros(n_requests), np.arange(n_requests)
    reached, passed, rounds = np.zeros(gamma), np.zeros(gamma), 0
    k = np.arange(gamma)
    while len(active):
        _, acc = source.draw(active, rng)
        reached += (acc[:, None] >= k).sum(axis=0)
        passed += (acc[:, None] > k).sum(axis=0)
        rounds += len(active)
        emitted[active] += acc + 1
        active = active[emitted[active] < tokens]
    return Served(passed / np.maximum(reached, 1), float(emitted.sum() / rounds), reached)
