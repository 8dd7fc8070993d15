"""Speculative sampling is exact: emitted tokens follow the target, whatever the drafter."""

import numpy as np
import pytest
import torch
from toy_spec import chain, joint_pvalue, speculative_decode

from dsim.models.sampling import overlap, verify

V, GAMMA, N_SEQ, OUT_LEN = 4, 3, 20000, 3


@pytest.mark.parametrize("length", [0, 1, 3])
def test_output_follows_target_joint_distribution(length: int) -> None:
    target, draft = chain(V, 1, 1.5), chain(V, 2, 1.5)
    out, _ = speculative_decode(
        target, draft, lambda s: np.full(len(s), length), N_SEQ, OUT_LEN, GAMMA, seed=10 + length
    )
    assert joint_pvalue(out, target) > 1e-3


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
