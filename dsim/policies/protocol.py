"""The contract between the engine and a verification policy (docs/policies.md, The protocol).

Each round the engine asks `lengths(conf, sps, truth)` for the R verify lengths: `conf` is the
batch's R x gamma conditional confidences, `sps(B)` the steps per second of a round that
verifies B tokens (vectorised over B; it already includes the drafter and any prefill work of
the step), and `truth` the accepted prefix had all drafts been verified (only the oracle may
look at it). `policy_traits` is the one place that fills in what a policy leaves out. A policy
that declares `reads_step` is also handed the step's shape (`StepContext`: T, N_sampling, the
request count, the requests' ids and how the engine prices the shapes it profiles at startup).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

SPS = Callable[[np.ndarray], np.ndarray] | np.ndarray
Observe = Callable[[np.ndarray, np.ndarray], None]
# Seconds of one engine pass at (tokens, sequences, KV context per sequence).
PassSeconds = Callable[[int, int, float], float]

# A policy that does not say is assumed to read this round's confidences, which must then be on
# the host before the verify pass is launched: the safe side of the scheduling cost.
DEFAULT_SYNCHRONOUS = True


class Policy(Protocol):
    """What every policy has. Optional members, with their defaults (`policy_traits`):

    - `synchronous: bool` (default `DEFAULT_SYNCHRONOUS`): it needs this round's confidences on
      the host before the verify pass, and pays the engine's per-round scheduling cost;
    - `observe(lengths, accepted)` (default: none): receives each round's outcome;
    - `reads_step: bool` (default False): `lengths` takes a fourth argument, the round's
      `StepContext`.
    """

    drafts: bool  # whether it runs the drafter at all (`ar`: no drafter cost, lengths not asked)

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray | None) -> np.ndarray:
        """R integers in 0..gamma: request r verifies drafts 1..lengths[r]."""
        ...


@dataclass(frozen=True)
class EngineCosts:
    """How the engine prices the shapes an engine-side scheduler times once at startup (its
    own cost tables, not the step of the moment): the target's verify pass and the drafter's
    round, each at (tokens or sequences, sequences, context), the token counts its CUDA graphs
    capture (increasing; empty: none), its step token limit and request limit, the drafts a
    round proposes and the target's vocabulary (0: unknown)."""

    verify_s: PassSeconds  # (tokens, sequences, context) -> seconds of the target's pass
    draft_s: Callable[[int, float], float]  # (sequences, context) -> the drafter's round
    capture_sizes: tuple[int, ...]
    max_tokens: int
    max_reqs: int
    gamma: int
    vocab: int


@dataclass(frozen=True)
class StepContext:
    """The shape of one decode step, for a policy that `reads_step`: its scheduled requests
    (running plus prefill chunks), T (its non-draft tokens: one per running request plus the
    prefill chunks' tokens), N_sampling (the requests that sample a token: every running
    request and each prefill chunk that completes its prompt), the running requests' ids (the
    rows of `conf`) and the engine's startup prices."""

    num_reqs: int
    non_draft_tokens: int
    num_sampling: int
    ids: np.ndarray
    costs: EngineCosts


@dataclass(frozen=True)
class Traits:
    """A policy's answers to what the engine asks once per run."""

    drafts: bool
    synchronous: bool
    observe: Observe | None
    reads_step: bool = False


def policy_traits(policy: Policy) -> Traits:
    """The policy's traits, its own where it declares them, else the protocol's defaults."""
    return Traits(
        drafts=bool(policy.drafts),
        synchronous=bool(getattr(policy, "synchronous", DEFAULT_SYNCHRONOUS)),
        observe=getattr(policy, "observe", None),
        reads_step=bool(getattr(policy, "reads_step", False)),
    )


def ask(
    policy: Policy, conf: np.ndarray, sps: SPS, truth: np.ndarray | None, step: StepContext | None
) -> np.ndarray:
    """`policy.lengths`, with the step's context for a policy that reads it."""
    if getattr(policy, "reads_step", False):
        if step is None:
            raise ValueError("this policy reads the step's context: pass a StepContext")
        return policy.lengths(conf, sps, truth, step)
    return policy.lengths(conf, sps, truth)


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
