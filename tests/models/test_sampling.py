"""Speculative sampling is exact: emitted tokens follow the target, whatever the drafter."""

import numpy as np
import pytest
import torch
from toy_spec import chain, joint_pvalue, speculative_decode

from dsim.models.sampling import overlap, verify
from dsim.models.speculative import emitted

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


def test_emitted_cuts_after_end_of_sequence_and_at_the_cap() -> None:
    eos = 9
    tokens = torch.tensor([[1, 9, 2, 3], [1, 2, 3, 9], [4, 5, 6, 7], [9, 1, 1, 1]])
    counts = torch.tensor([4, 3, 4, 1])  # row 1's EOS lies past what it produced
    n, ended = emitted(tokens, counts, eos)
    assert n.tolist() == [2, 3, 4, 1] and ended.tolist() == [True, False, False, True]
    n, ended = emitted(tokens, counts, eos, room=torch.tensor([1, 5, 2, 0]))
    assert n.tolist() == [1, 3, 2, 0]
    assert ended.tolist() == [False, False, False, False]  # the cap came first
    n, ended = emitted(tokens, counts, None)
    assert n.tolist() == counts.tolist() and not ended.any()
