"""One speculative round for the real models: verify drafts in one target pass, commit, emit.

As in gpt-fast's `generate.py`, a round is a few plain functions, and every caller runs the
same ones: `dsim collect` (`dsim.models.collect`), `dsim serve`'s backend
(`dsim.real.backend`) and the toy decoder (`dsim.models.toy_decoder`). The drafter's pass
comes first and is the caller's (the backend runs it in `draw`: the policy reads its
confidences before it picks the verify lengths); `verify_round` runs the target's pass over
[anchor, drafts] through a `TargetPass` (the ragged KV cache, or the toy's Markov chain),
rejection-samples (`dsim.models.sampling.verify`) and commits the accepted prefix to the
cache; `emitted` says what the round emits, cut after an end-of-sequence token and at the
output cap (plain sampling, `dsim.models.decode.generate`, cuts its answers with it too).

Glossary (the letters of the shape comments):
  R       sequences in the round
  w       the widest verify length this round: max l_r (at most the drafter's gamma)
  V       the target's vocabulary
  F       width of the drafter's input features (its target layers, concatenated)
  anchor  a sequence's last emitted token: not yet in the KV cache, the first query of a pass
  l_r     drafts verified for sequence r (`lengths`); n_r of them accepted, 0..l_r
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from dsim.models.sampling import Verdict, verify


class TargetPass(Protocol):
    """The target's side of a round for a fixed set of R sequences."""

    def score(self, block: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Append the first counts[r] tokens of block[r] (block: (R, w + 1)) to sequence r and
        return the target's next-token distribution after each (R, w + 1, V); entries past
        counts[r] are never read."""

    def commit(self, kept: torch.Tensor) -> None:
        """Keep the first kept[r] (R,) tokens of the last `score` in sequence r's cache."""


@dataclass
class Round:
    """What one round verified and decided, for each of R sequences."""

    verdict: Verdict  # accepted (R,) n_r; next_token (R,) the corrected or bonus token
    p_target: torch.Tensor  # (R, w + 1, V) the target's at [anchor, drafts]
    tokens: torch.Tensor  # (R, w + 1) the n_r accepted drafts, then next_token, then junk


def verify_round(
    anchor: torch.Tensor,
    drafts: torch.Tensor,
    p_draft: torch.Tensor,
    lengths: torch.Tensor,
    target: TargetPass,
    generator: torch.Generator | None,
    greedy: bool = False,
) -> Round:
    """Verify the first lengths[r] (R,) of each sequence's drafts (R, w) after its anchor (R,)
    in ONE target pass, rejection-sample against p_draft (R, w, V) and keep the anchor plus
    the accepted drafts in the cache."""
    block = torch.cat([anchor[:, None], drafts], dim=1)  # (R, w + 1)
    p_target = target.score(block, lengths + 1)  # (R, w + 1, V)
    verdict = verify(drafts, p_draft, p_target, lengths, generator, greedy)
    target.commit(verdict.accepted + 1)
    tokens = block.roll(-1, dims=1)  # (R, w + 1): the drafts, then a slot for next_token
    tokens[torch.arange(len(tokens)), verdict.accepted] = verdict.next_token
    return Round(verdict, p_target, tokens)


def emitted(
    tokens: torch.Tensor,
    counts: torch.Tensor,
    eos: int | None,
    room: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """How many of the first counts[r] (R,) of tokens[r] (R, k) sequence r emits (R,): up to
    and including the first end-of-sequence token, at most room[r] (R,), the output cap's
    room; and whether an end-of-sequence token ended it (R,) bool."""
    present = torch.arange(tokens.shape[1])[None, :] < counts[:, None]  # (R, k)
    is_eos = present & (tokens == eos) if eos is not None else torch.zeros_like(present)
    ended = is_eos.any(dim=1)  # (R,)
    n = torch.where(ended, is_eos.long().argmax(dim=1) + 1, counts)  # (R,)
    if room is None:
        return n, ended
    room = room.clamp(min=0)  # (R,)
    return torch.minimum(n, room), ended & (n <= room)
