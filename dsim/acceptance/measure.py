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


class Rounds(NamedTuple):
    """Every served round: the drafter's conditional confidences and the accepted prefix."""

    conf: np.ndarray  # (rounds, gamma)
    accepted: np.ndarray  # (rounds,)


def served_rounds(
    source: AcceptanceSource, n_requests: int, tokens: int, rng: np.random.Generator
) -> Rounds:
    """The rounds a serving run at full verification draws, in draw order."""
    source.bind(n_requests, rng)
    emitted, active = np.zeros(n_requests), np.arange(n_requests)
    confs, accs = [], []
    while len(active):
        conf, acc = source.draw(active, rng)
        confs.append(conf)
        accs.append(acc)
        emitted[active] += acc + 1
        active = active[emitted[active] < tokens]
    return Rounds(np.concatenate(confs), np.concatenate(accs))


def served_curve(
    source: AcceptanceSource, n_requests: int, tokens: int, rng: np.random.Generator
) -> Served:
    """The conditional curve, tau and rounds reaching each position, over served rounds."""
    return summarize(served_rounds(source, n_requests, tokens, rng).accepted, source.gamma)


def summarize(accepted: np.ndarray, gamma: int) -> Served:
    """Conditional curve, tau and rounds reaching each position of these rounds."""
    k = np.arange(gamma)
    reached = (accepted[:, None] >= k).sum(axis=0).astype(np.float64)
    passed = (accepted[:, None] > k).sum(axis=0)
    return Served(passed / np.maximum(reached, 1), float((accepted + 1).mean()), reached)
