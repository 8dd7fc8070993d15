"""The contract between the engine and a verification policy (docs/policies.md, The protocol).

Each round the engine asks `lengths(conf, sps, truth)` for the R verify lengths: `conf` is the
batch's R x gamma conditional confidences, `sps(B)` the steps per second of a round that
verifies B tokens (vectorised over B; it already includes the drafter and any prefill work of
the step), and `truth` the accepted prefix had all drafts been verified (only the oracle may
look at it). `policy_traits` is the one place that fills in what a policy leaves out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

SPS = Callable[[np.ndarray], np.ndarray] | np.ndarray
Observe = Callable[[np.ndarray, np.ndarray], None]

# A policy that does not say is assumed to read this round's confidences, which must then be on
# the host before the verify pass is launched: the safe side of the scheduling cost.
DEFAULT_SYNCHRONOUS = True


class Policy(Protocol):
    """What every policy has. Optional members, with their defaults (`policy_traits`):

    - `synchronous: bool` (default `DEFAULT_SYNCHRONOUS`): it needs this round's confidences on
      the host before the verify pass, and pays the engine's per-round scheduling cost;
    - `observe(lengths, accepted)` (default: none): receives each round's outcome.
    """

    drafts: bool  # whether it runs the drafter at all (`ar`: no drafter cost, lengths not asked)

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray | None) -> np.ndarray:
        """R integers in 0..gamma: request r verifies drafts 1..lengths[r]."""
        ...


@dataclass(frozen=True)
class Traits:
    """A policy's answers to what the engine asks once per run."""

    drafts: bool
    synchronous: bool
    observe: Observe | None


def policy_traits(policy: Policy) -> Traits:
    """The policy's traits, its own where it declares them, else the protocol's defaults."""
    return Traits(
        drafts=bool(policy.drafts),
        synchronous=bool(getattr(policy, "synchronous", DEFAULT_SYNCHRONOUS)),
        observe=getattr(policy, "observe", None),
    )


def sps_at(sps: SPS, b: np.ndarray) -> np.ndarray:
    """Evaluate SPS at token counts `b`: a callable, or a table indexed by B."""
    return sps[b] if isinstance(sps, np.ndarray) else np.asarray(sps(b), dtype=np.float64)


def sps_span(sps: SPS, start: int, stop: int) -> np.ndarray:
    """SPS at B = start..stop-1: a table's slice, the engine's `span`, or a plain callable."""
    if isinstance(sps, np.ndarray) and stop <= len(sps):  # a short table raises below
        return sps[start:stop]
    span = getattr(sps, "span", None)
    return span(start, stop) if span else sps_at(sps, np.arange(start, stop))


def ragged_penalty(sps: SPS) -> float:
    """The penalty a round with different lengths per request pays in this step (0: none)."""
    return float(getattr(sps, "ragged_penalty", 0.0))


def uniform_at(sps: SPS, b: np.ndarray) -> np.ndarray:
    """SPS at token counts `b` of a round whose requests all verify the same length."""
    uniform = getattr(sps, "uniform", None)
    return np.asarray(uniform(b), dtype=np.float64) if uniform else sps_at(sps, b)
