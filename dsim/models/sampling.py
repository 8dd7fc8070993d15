"""Exact speculative sampling, batched over sequences (docs/design.md, The speculative-decoding
round).

Each sequence tests its first `l_r` drafts left to right, keeping draft k with probability
min(1, p_t(x_k) / p_d(x_k)); the first rejection ends the prefix. The target then emits one
more token: from norm(max(0, p_t - p_d)) at the rejected position, or from p_t (the bonus) if
all `l_r` drafts survived. The emitted tokens follow the target's distribution exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Verdict:
    """Outcome of one verification round for each of B sequences."""

    accepted: torch.Tensor  # (B,) int64, accepted prefix length n_r in 0..l_r
    next_token: torch.Tensor  # (B,) int64, the corrected or bonus token


def sample(probs: torch.Tensor, generator: torch.Generator | None, greedy: bool) -> torch.Tensor:
    """One token per row of `probs` (..., V): argmax when greedy, else a categorical draw.

    Inverse-CDF sampling (one uniform per row, a cumulative sum and a binary search) is exact
    and, over a 49k vocabulary on CPU, about 30x cheaper per row than torch.multinomial, whose
    per-sequence cost otherwise dominates a real-mode round that the profile does not model.
    """
    if greedy:
        return probs.argmax(dim=-1)
    flat = probs.reshape(-1, probs.shape[-1]).double()
    cdf = flat.cumsum(dim=-1)
    u = torch.rand(flat.shape[0], 1, generator=generator, dtype=torch.float64)
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)  # right: skip zero-mass tokens
    return token.clamp_max(flat.shape[-1] - 1).reshape(probs.shape[:-1])


def overlap(p_draft: torch.Tensor, p_target: torch.Tensor) -> torch.Tensor:
    """sum_v min(p_d, p_t) = 1 - TV: the acceptance probability of one draft (the soft label)."""
    return torch.minimum(p_draft, p_target).sum(dim=-1)


def verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    lengths: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    greedy: bool = False,
) -> Verdict:
    """Rejection-test drafts against the target, vectorised over sequences.

    draft_tokens (B, g); draft_probs (B, g, V): the distribution each draft was sampled from;
    target_probs (B, g + 1, V): the target's distribution at each draft position given the
    drafts before it, plus one more position for the bonus token; lengths (B,): how many drafts
    to test per sequence (default g). With `greedy`, a draft survives iff it is the target's
    argmax and the emitted token is the argmax too (greedy decoding of the target).
    """
    batch, gamma = draft_tokens.shape
    if lengths is None:
        lengths = torch.full((batch,), gamma, dtype=torch.long)
    positions = torch.arange(gamma)
    tested = positions[None, :] < lengths[:, None]
    p_t = target_probs[:, :gamma].gather(-1, draft_tokens[..., None]).squeeze(-1)
    if greedy:
        ok = draft_tokens == target_probs[:, :gamma].argmax(dim=-1)
    else:
        p_d = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)
        u = torch.rand((batch, gamma), generator=generator, dtype=p_t.dtype)
        ok = u * p_d < p_t  # u < p_t / p_d without dividing by a zero draft probability
    ok = ok & tested
    accepted = torch.cumprod(ok.long(), dim=1).sum(dim=1)
    rows = torch.arange(batch)
    p_next = target_probs[rows, accepted]
    if not greedy:
        rejected = accepted < lengths
        q_next = draft_probs[rows, accepted.clamp(max=gamma - 1)] if gamma else p_next
        residual = torch.clamp(p_next - q_next, min=0.0)
        mass = residual.sum(dim=-1, keepdim=True)
        # A rejection has probability 0 when p_d <= p_t everywhere; guard the 0/0 of rounding.
        use_residual = (rejected[:, None] & (mass > 0)).expand_as(p_next)
        p_next = torch.where(use_residual, residual / mass.clamp(min=1e-30), p_next)
    return Verdict(accepted, sample(p_next, generator, greedy))
