"""Speculative sampling is exact: emitted tokens follow the target, whatever the drafter."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from dsim.models.sampling import overlap, verify

V, GAMMA, N_SEQ, OUT_LEN = 4, 3, 20000, 3


def _chain(seed: int, sharp: float) -> torch.Tensor:
    """A Markov chain over a toy vocabulary: probs[prev, next] (row V is the start state)."""
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(sharp * torch.randn(V + 1, V, generator=g, dtype=torch.float64), -1)


def _decode(target: torch.Tensor, draft: torch.Tensor, length: int, seed: int) -> torch.Tensor:
    """Speculative decoding of N_SEQ sequences until each has OUT_LEN tokens."""
    g = torch.Generator().manual_seed(seed)
    out = torch.full((N_SEQ, OUT_LEN + 2 * GAMMA + 2), -1, dtype=torch.long)
    filled = torch.zeros(N_SEQ, dtype=torch.long)
    prev = torch.full((N_SEQ,), V, dtype=torch.long)
    rows = torch.arange(N_SEQ)
    while bool((filled < OUT_LEN).any()):
        tokens, q_probs, p_probs, state = [], [], [], prev
        for _ in range(GAMMA):
            q = draft[state]
            p_probs.append(target[state])
            q_probs.append(q)
            state = torch.multinomial(q, 1, generator=g).squeeze(1)
            tokens.append(state)
        p_probs.append(target[state])
        drafts = torch.stack(tokens, 1)
        verdict = verify(
            drafts,
            torch.stack(q_probs, 1),
            torch.stack(p_probs, 1),
            torch.full((N_SEQ,), length),
            generator=g,
        )
        active = filled < OUT_LEN
        for k in range(GAMMA + 1):
            emit = torch.where(k < verdict.accepted, drafts[:, min(k, GAMMA - 1)], -1)
            emit = torch.where(k == verdict.accepted, verdict.next_token, emit)
            keep = (emit >= 0) & active
            out[rows[keep], filled[keep] + k] = emit[keep]
        filled += torch.where(active, verdict.accepted + 1, 0)
        prev = verdict.next_token
    return out[:, :OUT_LEN]


@pytest.mark.parametrize("length", [0, 1, 3])
def test_output_follows_target_joint_distribution(length: int) -> None:
    target, draft = _chain(1, 1.5), _chain(2, 1.5)
    out = _decode(target, draft, length, seed=10 + length).numpy()
    cells = out[:, 0] * V * V + out[:, 1] * V + out[:, 2]
    observed = np.bincount(cells, minlength=V**3)
    t = target.numpy()
    start = t[V]
    expected = np.einsum("a,ab,bc->abc", start, t[:V], t[:V]).ravel() * N_SEQ
    assert chisquare(observed, expected).pvalue > 1e-3


def test_draft_equal_to_target_is_always_accepted() -> None:
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(64, GAMMA + 1, V, generator=g), -1)
    drafts = torch.multinomial(p[:, :GAMMA].reshape(-1, V), 1, generator=g).reshape(64, GAMMA)
    verdict = verify(drafts, p[:, :GAMMA], p, generator=g)
    assert bool((verdict.accepted == GAMMA).all())
    assert torch.allclose(overlap(p, p), torch.ones(64, GAMMA + 1))


def test_verify_length_limits_tested_drafts_and_greedy_matches_argmax() -> None:
    p = torch.tensor([[0.1, 0.7, 0.1, 0.1]]).repeat(1, GAMMA + 1, 1)
    drafts = torch.tensor([[1, 1, 2]])
    verdict = verify(drafts, p[:, :GAMMA], p, torch.tensor([2]), greedy=True)
    assert verdict.accepted.tolist() == [2]
    assert verdict.next_token.tolist() == [1]
    verdict = verify(drafts, p[:, :GAMMA], p, greedy=True)
    assert verdict.accepted.tolist() == [2]  # draft 3 is not the argmax
