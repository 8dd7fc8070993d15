"""A toy speculative decoder over a tiny Markov vocabulary, driving the real sampling code.

Shared by the exactness tests of the sampler and of the verification policies and by
`dsim check-policy`: they decode many sequences and compare the joint distribution of the first
tokens with the target's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.stats import chisquare

from dsim.models.sampling import verify


def chain(vocab: int, seed: int, sharp: float) -> torch.Tensor:
    """A Markov chain over the toy vocabulary: probs[prev, next] (row `vocab` is the start)."""
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(
        sharp * torch.randn(vocab + 1, vocab, generator=g, dtype=torch.float64), -1
    )


def speculative_decode(
    target: torch.Tensor,
    draft: torch.Tensor,
    lengths_for: Callable[[np.ndarray], np.ndarray],
    n_seq: int,
    out_len: int,
    gamma: int,
    seed: int,
    observe: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Decode `n_seq` sequences until each has `out_len` tokens.

    Each round drafts `gamma` tokens per sequence from `draft`; `lengths_for(states)` gets the
    states each draft was drawn from (n_seq x gamma: the previous token, or the start state)
    and returns the verify lengths; `observe(lengths, accepted)`, if given, hears each round's
    outcome. Returns the tokens and the first round's lengths.
    """
    vocab = draft.shape[1]
    g = torch.Generator().manual_seed(seed)
    out = torch.full((n_seq, out_len + gamma + 1), -1, dtype=torch.long)
    filled = torch.zeros(n_seq, dtype=torch.long)
    prev = torch.full((n_seq,), vocab, dtype=torch.long)
    rows, first_lengths = torch.arange(n_seq), None
    while bool((filled < out_len).any()):
        tokens, states, state = [], [], prev
        for _ in range(gamma):
            states.append(state)
            state = torch.multinomial(draft[state], 1, generator=g).squeeze(1)
            tokens.append(state)
        states_t = torch.stack(states, 1)
        lengths = np.asarray(lengths_for(states_t.numpy()))
        first_lengths = lengths if first_lengths is None else first_lengths
        drafts = torch.stack(tokens, 1)
        p_states = torch.cat([states_t, drafts[:, -1:]], 1)
        verdict = verify(drafts, draft[states_t], target[p_states], torch.as_tensor(lengths),
                         generator=g)  # fmt: skip
        if observe is not None:
            observe(lengths, verdict.accepted.numpy())
        active = filled < out_len
        for k in range(gamma + 1):
            emit = torch.where(k < verdict.accepted, drafts[:, min(k, gamma - 1)], -1)
            emit = torch.where(k == verdict.accepted, verdict.next_token, emit)
            keep = (emit >= 0) & active
            out[rows[keep], filled[keep] + k] = emit[keep]
        filled += torch.where(active, verdict.accepted + 1, 0)
        prev = verdict.next_token
    return out[:, :out_len].numpy(), first_lengths


def joint_pvalue(out: np.ndarray, target: torch.Tensor) -> float:
    """Chi-square p-value of the first three tokens against the target chain's joint law.

    Cells expected to hold fewer than 5 sequences are pooled into one (the usual validity rule of
    the chi-square approximation: a single draw in a cell expected to hold 0.01 would otherwise
    decide the test).
    """
    vocab = target.shape[1]
    cells = out[:, 0] * vocab * vocab + out[:, 1] * vocab + out[:, 2]
    observed = np.bincount(cells, minlength=vocab**3)
    t = target.numpy()
    expected = np.einsum("a,ab,bc->abc", t[vocab], t[:vocab], t[:vocab]).ravel() * len(out)
    small = expected < 5
    observed = np.r_[observed[~small], observed[small].sum()]
    expected = np.r_[expected[~small], expected[small].sum()]
    return float(chisquare(observed, expected).pvalue)
