"""Losslessness of the verification policies, with the real policy and sampling code.

The rule and its worked counterexample: docs/design.md, The losslessness rule.

Speculative decoding is exact only if the decision to verify draft k depends on nothing but
drafts 1..k-1. Confidences here depend on the drafted tokens (c_k is a function of x_{k-1}),
which is exactly what a global search without early stop gets wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toy_spec import chain, joint_pvalue, speculative_decode

from dsim.models.sampling import verify
from dsim.policies import _candidates, _to_lengths, global_capacity, parse_policy

V, GAMMA, OUT_LEN, N_SEQ, BATCH = 4, 3, 3, 24000, 2
# Conditional confidence of the next draft given the previous token (row V: the start state).
CONF = np.array([0.95, 0.15, 0.8, 0.5, 0.9])


TARGET, DRAFT = chain(V, 1, 1.5), chain(V, 2, 1.5)


def concave(batch_tokens):
    """Steps per second of a round verifying B tokens: slows down smoothly as B grows, so
    every policy picks varied lengths."""
    return 1.0 / (1.0 + 0.12 * np.asarray(batch_tokens, dtype=np.float64))


# A cliff after one extra token, then flat (as in the worked counterexample of docs/design.md):
# long blocks can pay when short ones do not, which is where a search without early stop
# looks ahead.
CLIFF = np.array([np.nan, np.nan, 1.0, 0.9, 0.55, 0.5, 0.5, 0.5, 0.5])
PROFILES = {"concave": concave, "cliff": CLIFF}


def global_search(conf, sps_fn, truth=None):
    """Synchronous global search WITHOUT the early stop (the flawed variant of Algorithm 1)."""
    rows, _ = _candidates(conf)
    return _to_lengths(rows[: global_capacity(conf, sps_fn)], conf.shape[0])


def decode(policy: str, sps, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Speculative decoding of N_SEQ sequences in batches of BATCH until each has OUT_LEN
    tokens, each batch scheduled by its own policy object (dspark-async keeps state); returns
    the tokens and the verify lengths chosen in the first round."""
    n_batches = N_SEQ // BATCH
    if policy == "global":
        choose = [lambda conf: global_search(conf, sps)] * n_batches
    else:
        policies = [parse_policy(policy) for _ in range(n_batches)]
        choose = [lambda conf, p=p: p.lengths(conf, sps, None) for p in policies]

    def lengths_for(states: np.ndarray) -> np.ndarray:
        conf = CONF[states]  # the confidence of each draft depends on the token before it
        return np.concatenate([f(conf[i * BATCH : (i + 1) * BATCH]) for i, f in enumerate(choose)])

    return speculative_decode(TARGET, DRAFT, lengths_for, N_SEQ, OUT_LEN, GAMMA, seed)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("policy", ["ar", "fixed:2", "dspark", "dspark-async"])
def test_policies_are_lossless(policy: str, profile: str) -> None:
    out, lengths = decode(policy, PROFILES[profile], seed=3)
    if policy not in ("ar", "fixed:2"):  # the test means something only if lengths vary
        assert len(np.unique(lengths)) >= 2
    assert joint_pvalue(out, TARGET) > 1e-3


def test_global_search_without_early_stop_is_biased() -> None:
    """The same test catches the flawed variant under the cliff profile: it has power."""
    out, lengths = decode("global", CLIFF, seed=3)
    assert len(np.unique(lengths)) >= 3
    assert joint_pvalue(out, TARGET) < 1e-6


# -- the worked counterexample of docs/design.md --------------------------------------------
N_TRIALS = 40000
SPS_TABLE = np.array([np.nan, 1.0, 0.5, 0.45])  # SPS(B) for B = 1, 2, 3 tokens
P_TARGET = torch.tensor([0.7, 0.3], dtype=torch.float64)
P_DRAFT = torch.tensor([0.5, 0.5], dtype=torch.float64)


def first_token_a(choose) -> float:
    """Fraction of trials whose first emitted token is A (token 0): one request, gamma 2,
    c_1 = 0.8, c_2 = 0.9 after drafting A and 0 after B."""
    g = torch.Generator().manual_seed(7)
    drafts = torch.multinomial(P_DRAFT.expand(N_TRIALS, 2), 2, replacement=True, generator=g)
    conf = np.where(drafts[:, :1].numpy() == 0, [[0.8, 0.9]], [[0.8, 0.0]])
    lengths = np.array([choose(conf[i : i + 1])[0] for i in range(N_TRIALS)])
    verdict = verify(
        drafts,
        P_DRAFT.expand(N_TRIALS, 2, 2),
        P_TARGET.expand(N_TRIALS, 3, 2),
        torch.as_tensor(lengths),
        generator=g,
    )
    first = torch.where(verdict.accepted > 0, drafts[:, 0], verdict.next_token)
    return float((first == 0).double().mean())


def _close(p_hat: float, p: float) -> bool:
    return abs(p_hat - p) < 4 * np.sqrt(p * (1 - p) / N_TRIALS)


def test_counterexample_global_search_gives_085() -> None:
    p_hat = first_token_a(lambda conf: global_search(conf, SPS_TABLE))
    assert _close(p_hat, 0.85) and not _close(p_hat, 0.7)


def test_counterexample_dspark_gives_07() -> None:
    policy = parse_policy("dspark")
    assert _close(first_token_a(lambda conf: policy.lengths(conf, SPS_TABLE, None)), 0.7)


def test_counterexample_dspark_async_gives_07_once_history_is_old() -> None:
    """Trials run as consecutive rounds of one policy: each round's capacity comes from the
    confidences of the trial two rounds earlier, independent of this round's drafts."""
    policy = parse_policy("dspark-async")
    warm = np.array([[0.8, 0.9]])
    policy.lengths(warm, SPS_TABLE, None)
    policy.lengths(warm, SPS_TABLE, None)
    assert _close(first_token_a(lambda conf: policy.lengths(conf, SPS_TABLE, None)), 0.7)


def test_counterexample_dspark_async_first_round() -> None:
    p_hat = first_token_a(lambda conf: parse_policy("dspark-async").lengths(conf, SPS_TABLE, None))
    assert _close(p_hat, 0.7)
