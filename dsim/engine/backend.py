"""What executes a round for the engine: simulated acceptance, or real model passes.

The engine asks a backend for the running requests' confidences (the drafter's pass), lets the
policy choose verify lengths, then asks the backend to verify them (the target's pass). A
backend reports the tokens each request emitted, the drafts it accepted and, with `stop` flags,
which of them ended on an end-of-sequence token; it neither knows nor applies output caps (the
engine does). A simulated backend replays an acceptance model: a request accepts
min(true prefix, l) drafts and emits them plus the target's token. A real backend
(`dsim.real`) runs the drafter and target.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from dsim.acceptance.sources import AcceptanceSource
from dsim.engine.round_kernels import simulated_verify


class Backend(Protocol):
    gamma: int

    def bind(self, n_requests: int, rng: np.random.Generator) -> None:
        """Prepare per-request state for requests 0..n-1."""

    def draw(self, idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Conditional confidences (R x gamma) and, when known in advance, the true prefix."""

    def verify(
        self, idx: np.ndarray, lengths: np.ndarray, truth: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Per request, for verify lengths `lengths`: the tokens emitted (accepted drafts + 1,
        or up to and including an end-of-sequence token), the accepted drafts among them (as
        the backend measured them: an end-of-sequence token may itself be an accepted draft)
        and end-of-sequence flags (None: none)."""

    def plain(
        self, idx: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """A plain-decoding round (a policy that does not draft): what `verify` with zero
        lengths reports, without the engine asking for confidences first."""

    def prefill(self, idx: list[int], tokens: list[int], done: list[bool]) -> np.ndarray | None:
        """This step's prefill chunks: `tokens[k]` more tokens of request idx[k]'s context;
        `done[k]` when the chunk completes it. Flags the completed requests (those with done,
        in order) whose first token is an end-of-sequence token (None: none)."""

    def released(self, idx: np.ndarray) -> None:
        """Requests that finished or were preempted: drop their state."""


class Simulated:
    """A backend over an acceptance model: the accepted prefix is min(true prefix, l)."""

    def __init__(self, source: AcceptanceSource) -> None:
        self.source = source
        self.gamma = source.gamma
        self.bind = source.bind
        self.draw = source.draw
        self._plain: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # rows -> (ones, zeros)

    def verify(
        self, idx: np.ndarray, lengths: np.ndarray, truth: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, None]:
        emitted, accepted = simulated_verify(truth, lengths)
        return emitted, accepted, None

    def plain(
        self, idx: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, None]:
        """One token a request and no draft accepted: the acceptance model is not drawn, since
        no draft is verified (the same arrays for every round of a batch size: the engine
        only reads them)."""
        rows = len(idx)
        if rows not in self._plain:
            self._plain[rows] = np.ones(rows, np.int64), np.zeros(rows, np.int64)
        emitted, accepted = self._plain[rows]
        return emitted, accepted, None

    def prefill(self, idx: list[int], tokens: list[int], done: list[bool]) -> None:
        return None

    def released(self, idx: np.ndarray) -> None:
        return None
