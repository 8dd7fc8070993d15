"""Losslessness of the verification policies, with the real policy and sampling code.

The rule and its worked counterexample: docs/design.md, The losslessness rule.

Speculative decoding is exact only if the decision to verify draft k depends on nothing but
drafts 1..k-1. Confidences here depend on the drafted tokens (c_k is a function of x_{k-1}),
which is exactly what a global search without early stop, or an SLA that removes admitted
candidates, gets wrong. Two checks (dsim/policies/check.py, also behind `dsim check-policy`):
the property on random instances, and a chi-square test of the decoded tokens.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from conftest import ROOT, example_specs
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dsim.models.sampling import verify
from dsim.models.toy_decoder import joint_pvalue
from dsim.policies import global_capacity, parse_policy
from dsim.policies.check import (
    MAX_GAMMA,
    MAX_REQUESTS,
    SLA_FACTORS,
    TOY_SETTINGS,
    Instance,
    check_property,
    sps_step,
    toy_chains,
    toy_decode,
    violation,
)
from dsim.policies.schedule import candidates, throughput, to_lengths

BIASED = str(ROOT / "docs" / "examples" / "biased_policy.py")
N_SEQ = 24000
TARGET, _ = toy_chains()
# Every registered built-in but the oracle, which sees the outcome and is lossless by no rule.
LOSSLESS = [spec for spec in example_specs() if spec != "oracle"]
CONF_SET = (0.0, 0.3, 0.5, 0.8, 0.9, 1.0)
EXAMPLES = 50  # per policy and SLA setting, beside the checker's 720 per policy


def global_search(conf, sps_fn, truth=None):
    """Synchronous global search WITHOUT the early stop (the flawed variant of Algorithm 1)."""
    rows, _ = candidates(conf)
    return to_lengths(rows[: global_capacity(conf, sps_fn)], conf.shape[0])


class OldSlaCut:
    """The SLA rule issue 11 replaced: Algorithm 1, then the largest k' <= k whose round keeps
    every request's expected speed >= the SLA (0 if none): later candidates decide earlier ones."""

    drafts = True

    def __init__(self, sla_tps=None):
        self.sla_tps = sla_tps

    def lengths(self, conf, sps, truth):
        r = conf.shape[0]
        rows, survival = candidates(conf)
        speed, theta = throughput(sps, r, survival)
        worse = np.flatnonzero(np.diff(theta) <= 0)
        k = int(worse[0]) if len(worse) else len(survival)
        while self.sla_tps is not None and k > 0:
            slowest = 1.0 + np.bincount(rows[:k], weights=survival[:k], minlength=r).min()
            if speed[k] * slowest >= self.sla_tps:
                break
            k -= 1
        return to_lengths(rows[:k], r)


# -- the property on random instances -----------------------------------------------------------
@functools.cache  # one strategy object per shape: building and validating them is the cost
def confidences(r: int, gamma: int) -> st.SearchStrategy[np.ndarray]:
    """Continuous confidences, or values from a small set (ties, zeros and ones)."""
    values = st.one_of(st.floats(0.0, 1.0), st.sampled_from(CONF_SET))
    return arrays(np.float64, (r, gamma), elements=values)


@functools.cache
def truths(rows: int, gamma: int) -> st.SearchStrategy[np.ndarray]:
    """Accepted prefixes had every draft been verified (only the oracle reads them)."""
    return arrays(np.int64, rows, elements=st.integers(0, gamma))


@functools.cache
def sps_steps(size: int) -> st.SearchStrategy[np.ndarray]:
    """Latency steps between consecutive B, often none (flat stretches)."""
    return arrays(np.float64, size, elements=st.one_of(st.just(0.0), st.floats(0.0, 3.0)))


@st.composite
def sps_tables(draw, max_tokens: int) -> np.ndarray:
    """Steps per second by batch tokens: smooth, jagged (flat stretches and cliffs, where a
    search without early stop looks ahead), or rising somewhere (the SLA stop's dense path)."""
    size = max_tokens + 1
    base = draw(st.floats(0.5, 5.0))
    kind = draw(st.sampled_from(["smooth", "jagged", "any"]))
    if kind == "smooth":
        knee, slope = draw(st.floats(0.0, 6.0)), draw(st.floats(0.05, 1.0))
        return 1.0 / (base + np.maximum(knee, np.arange(size)) * slope)
    steps = draw(sps_steps(size))
    return 1.0 / (base + (np.cumsum(steps) if kind == "jagged" else steps))


@st.composite
def instances(draw, with_sla: bool) -> Instance:
    """One round asked twice, the second time with one request's confidences after draft j
    changed, after 0-3 earlier rounds; sizes as `dsim check-policy` tries them."""
    r, gamma = draw(st.integers(1, MAX_REQUESTS)), draw(st.integers(2, MAX_GAMMA))
    sps = draw(sps_tables((r + 2) * (gamma + 1)))

    warmup = [
        (draw(confidences(rows, gamma)), draw(truths(rows, gamma)))
        for rows in draw(st.lists(st.integers(1, r + 2), max_size=3))
    ]
    conf = draw(confidences(r, gamma))
    request, draft = draw(st.integers(0, r - 1)), draw(st.integers(1, gamma - 1))
    changed = conf.copy()
    changed[request, draft:] = draw(confidences(1, gamma - draft))[0]
    factor = draw(st.sampled_from(SLA_FACTORS[1:])) if with_sla else None
    sla = None if factor is None else factor * float(sps[r])
    truth = draw(truths(r, gamma))
    return Instance(conf, changed, request, draft, sps, sla, warmup, truth)


@pytest.mark.parametrize("with_sla", [False, True], ids=["no-sla", "sla"])
@pytest.mark.parametrize("spec", LOSSLESS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_no_policy_verifies_a_draft_by_the_drafts_after_it(spec, with_sla, data) -> None:
    inst = data.draw(instances(with_sla))
    found = violation(lambda sla: parse_policy(spec, sla), inst)
    assert found is None, found.describe()


@pytest.mark.parametrize("spec", LOSSLESS)
def test_property_holds_for_every_built_in_policy_and_sla(spec: str) -> None:
    """The checker behind `dsim check-policy`: every size and SLA setting, smallest first."""
    runs, found = check_property(lambda sla: parse_policy(spec, sla), trials=6, seed=1)
    assert found is None, found.describe()
    assert runs == 5 * 4 * 6 * 6


@pytest.mark.parametrize(
    "make", [lambda sla: OldSlaCut(sla), lambda sla: parse_policy(f"{BIASED}:GlobalSearch")]
)
def test_property_catches_the_flawed_rules(make) -> None:
    _, found = check_property(make, trials=30, seed=1)
    assert found is not None
    r, d = found.instance.request, found.instance.draft
    assert min(found.lengths[r], d) != min(found.changed_lengths[r], d)
    assert found.instance.conf.shape[0] <= 2  # shrunk to (nearly) the smallest case


# -- the decoded tokens on the toy vocabulary ---------------------------------------------------
@functools.cache
def decoded(spec: str, profile: str, sla: float | None, seed: int = 3):
    return toy_decode(lambda s: parse_policy(spec, s), profile, sla, N_SEQ, seed)


@pytest.mark.parametrize(("profile", "sla"), TOY_SETTINGS)
@pytest.mark.parametrize("spec", ["dspark", "dspark-async", "goodput", "vllm-adaptive"])
def test_adaptive_policies_are_lossless(spec: str, profile: str, sla: float | None) -> None:
    out, rounds = decoded(spec, profile, sla)
    assert len(np.unique(np.concatenate(rounds))) >= 2  # lengths vary: the test means something
    assert joint_pvalue(out, TARGET) > 1e-3


@pytest.mark.parametrize(
    ("spec", "profile"), [("ar", "concave"), ("fixed:2", "cliff"), ("threshold:0.5", "cliff")]
)
def test_static_policies_are_lossless(spec: str, profile: str) -> None:
    out, _ = decoded(spec, profile, None)
    assert joint_pvalue(out, TARGET) > 1e-3


@pytest.mark.parametrize(("profile", "sla"), [s for s in TOY_SETTINGS if s[1] is not None])
def test_sla_settings_change_the_schedule(profile: str, sla: float) -> None:
    """The SLA rows above test the SLA rule only if it binds: it shortens many rounds."""
    _, free = decoded("dspark", profile, None)
    _, capped = decoded("dspark", profile, sla)
    shorter = sum((c < f).sum() for f, c in zip(free, capped, strict=False))
    assert shorter > 0.05 * N_SEQ


def test_global_search_without_early_stop_is_biased() -> None:
    """The same test catches the flawed variant under the cliff profile: it has power."""
    out, rounds = toy_decode(lambda s: parse_policy(f"{BIASED}:GlobalSearch"), "cliff", None,
                             N_SEQ, 3)  # fmt: skip
    assert len(np.unique(rounds[0])) >= 3
    assert joint_pvalue(out, TARGET) < 1e-6


# -- worked cases: docs/design.md (The losslessness rule) and issue 11 -----------------------------
N_TRIALS = 40000
SPS_TABLE = np.array([np.nan, 1.0, 0.5, 0.45])  # SPS(B) for B = 1, 2, 3 tokens
SPS_SLA = np.array([np.nan, 1.0, 0.95, 0.9])  # issue 11's SLA case, with --sla-tps 1.75
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


@pytest.mark.parametrize("spec", ["dspark", "goodput"])
def test_counterexample_gives_07(spec: str) -> None:
    """goodput chose its length from this round's confidences before issue 11 (2 vs 0 here)."""
    policy = parse_policy(spec)
    assert _close(first_token_a(lambda conf: policy.lengths(conf, SPS_TABLE, None)), 0.7)


def test_issue_sla_counterexample_old_cut_gives_085_prefix_rule_07() -> None:
    old = OldSlaCut(1.75)
    p_old = first_token_a(lambda conf: old.lengths(conf, SPS_SLA, None))
    assert _close(p_old, 0.85) and not _close(p_old, 0.7)
    new = parse_policy("dspark", 1.75)
    assert _close(first_token_a(lambda conf: new.lengths(conf, SPS_SLA, None)), 0.7)


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


def test_counterexample_vllm_adaptive_gives_07_with_its_budget_a_round_late() -> None:
    """Trials run as consecutive rounds of one request: the budget is the global argmax (no
    early stop) over the previous trial's confidences, so it is 2 after that trial drew A and 0
    after B, and never reads this trial's draft: the target's P(A) = 0.7 holds."""
    policy = parse_policy("vllm-adaptive")
    step = sps_step(lambda b: SPS_TABLE[np.asarray(b)], 1, 2, 3)
    seen: list[int] = []

    def choose(conf):
        out = policy.lengths(conf, SPS_TABLE, None, step)
        seen.append(int(out[0]))
        return out

    assert _close(first_token_a(choose), 0.7)
    assert set(seen) == {0, 2}  # the budget does move: the test has power
