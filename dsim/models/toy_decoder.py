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

from dsim.models.speculative import emitted, verify_round


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
    out = torch.full((n_seq, out_len), -1, dtype=torch.long)
    filled = torch.zeros(n_seq, dtype=torch.long)
    prev = torch.full((n_seq,), vocab, dtype=torch.long)
    chains, first_lengths = Chains(target), None
    while bool((filled < out_len).any()):
        tokens, states, state = [], [], prev
        for _ in range(gamma):
            states.append(state)
            state = torch.multinomial(draft[state], 1, generator=g).squeeze(1)
            tokens.append(state)
        states_t = torch.stack(states, 1)  # (n_seq, gamma) the state each draft was drawn from
        lengths = np.asarray(lengths_for(states_t.numpy()))
        first_lengths = lengths if first_lengths is None else first_lengths
        drafts = torch.stack(tokens, 1)  # (n_seq, gamma)
        done = verify_round(prev, drafts, draft[states_t], torch.as_tensor(lengths), chains, g)
        accepted = done.verdict.accepted  # (n_seq,)
        if observe is not None:
            observe(lengths, accepted.numpy())
        counts, _ = emitted(done.tokens, accepted + 1, None, out_len - filled)  # (n_seq,)
        for k in range(gamma + 1):
            rows = torch.nonzero(k < counts).squeeze(1)
            out[rows, filled[rows] + k] = done.tokens[rows, k]
        filled += counts
        prev = done.verdict.next_token
    return out.numpy(), first_lengths


class Chains:
    """The toy target as a `dsim.models.speculative.TargetPass`: a Markov chain keeps no cache."""

    def __init__(self, probs: torch.Tensor) -> None:
        self.probs = probs  # (vocab + 1, vocab)

    def score(self, block: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return self.probs[block]  # (n_seq, gamma + 1, vocab): the next state after each

    def commit(self, kept: torch.Tensor) -> None:
        return None


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
