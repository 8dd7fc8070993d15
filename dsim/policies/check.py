"""Is a verification policy lossless? The two checks behind `dsim check-policy` (docs/policies.md).

1. The property, on random instances: whether draft j of request r is verified never depends on
   r's confidences of drafts j+1..gamma (they are computed from draft j). Each instance runs two
   fresh copies of the policy through the same earlier rounds, then asks both for one round
   whose confidences differ only in one request's drafts after j. Sizes are tried smallest
   first and a failure is shrunk (other requests dropped, trailing drafts cut), so the
   counterexample reported is among the smallest there are.
2. The outcome: speculative decoding on a toy Markov vocabulary with the real sampling code,
   each draft's confidence a function of the token before it; a chi-square test compares the
   first three tokens with the target's joint law.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from dsim.policies.protocol import SPS, EngineCosts, Policy, StepContext, ask, policy_traits

# SLA settings: none, or this factor times SPS(R), the speed of a round that verifies no draft;
# 1e9 is an SLA no round can meet.
SLA_FACTORS = (None, 0.6, 1.0, 1.4, 2.5, 1e9)
MAX_REQUESTS, MAX_GAMMA = 5, 5

MakePolicy = Callable[[float | None], Policy]


@dataclass
class Instance:
    """One property trial: earlier rounds, then one round asked with `conf` and with `changed`
    (which differs from `conf` only in row `request`, drafts after `draft`)."""

    conf: np.ndarray
    changed: np.ndarray
    request: int
    draft: int  # 1-based; drafts draft + 1 .. gamma of `request` differ
    sps: np.ndarray  # steps per second by batch tokens B (index)
    sla_tps: float | None
    warmup: list[tuple[np.ndarray, np.ndarray]]  # earlier rounds: (conf, truth)
    truth: np.ndarray


@dataclass
class Counterexample:
    instance: Instance
    lengths: np.ndarray
    changed_lengths: np.ndarray

    def describe(self) -> str:
        i = self.instance
        r, gamma = i.conf.shape
        top = r * (gamma + 1)
        sla = "none" if i.sla_tps is None else f"{i.sla_tps:.6g} tok/s"
        return "\n".join(
            [
                f"draft {i.draft} of request {i.request} is verified under one value of that "
                f"request's later confidences and not under another:",
                f"  requests {r}, gamma {gamma}, SLA {sla}, after {len(i.warmup)} earlier rounds",
                f"  SPS(B) for B = {r}..{top}: {_fmt(i.sps[r : top + 1])}",
                f"  confidences {_fmt(i.conf)} -> lengths {_fmt(self.lengths)}",
                f"  confidences {_fmt(i.changed)} -> lengths {_fmt(self.changed_lengths)}",
            ]
        )


def _fmt(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a), precision=4, separator=", ", max_line_width=10**6)


def random_conf(rng: np.random.Generator, r: int, gamma: int) -> np.ndarray:
    """Continuous confidences, or values from a small set (ties, zeros and ones)."""
    if rng.random() < 0.5:
        return rng.uniform(0, 1, (r, gamma)) ** rng.uniform(0.2, 2)
    return rng.choice([0.0, 0.3, 0.5, 0.8, 0.9, 1.0], (r, gamma))


def random_sps(rng: np.random.Generator, max_tokens: int) -> np.ndarray:
    """Steps per second by batch tokens: smooth, or jagged (flat stretches and cliffs, where a
    search without early stop looks ahead)."""
    b = np.arange(max_tokens + 1)
    if rng.random() < 0.3:
        latency = rng.uniform(0.5, 5) + np.maximum(rng.uniform(0, 6), b) * rng.uniform(0.05, 1)
    else:
        steps = rng.exponential(1, len(b)) * (rng.random(len(b)) < rng.uniform(0.1, 0.9))
        latency = rng.uniform(0.5, 3) + np.cumsum(steps) * rng.uniform(0.05, 1)
    return 1.0 / latency


def random_instance(
    rng: np.random.Generator, r: int, gamma: int, sla_factor: float | None
) -> Instance:
    sps = random_sps(rng, (r + 2) * (gamma + 1))
    warmup = []
    for _ in range(rng.integers(0, 4)):
        rw = int(rng.integers(1, r + 3))
        warmup.append((random_conf(rng, rw, gamma), rng.integers(0, gamma + 1, rw)))
    conf = random_conf(rng, r, gamma)
    request, draft = int(rng.integers(0, r)), int(rng.integers(1, gamma))
    changed = conf.copy()
    changed[request, draft:] = random_conf(rng, 1, gamma - draft)[0]
    sla = None if sla_factor is None else sla_factor * float(sps[r])
    return Instance(conf, changed, request, draft, sps, sla, warmup, rng.integers(0, gamma + 1, r))


def sps_step(sps: SPS, r: int, gamma: int, max_tokens: int) -> StepContext:
    """A decode step of r running requests (ids 0..r-1, no prefill) for a policy that reads
    the step: its startup prices are the SPS itself, 1 / SPS(B) at every B = 1..max_tokens
    where SPS is finite, with no drafter cost and no logits cap."""
    b = np.arange(1, max_tokens + 1)
    seconds = 1.0 / np.asarray(sps(b), np.float64)
    ok = np.isfinite(seconds)
    costs = EngineCosts(
        verify_s=lambda n, seqs, ctx: float(seconds[n - 1]),
        draft_s=lambda seqs, ctx: 0.0,
        capture_sizes=tuple(int(n) for n in b[ok]),
        max_tokens=max_tokens,
        max_reqs=max_tokens,
        gamma=gamma,
        vocab=0,
    )
    return StepContext(r, r, r, np.arange(r), costs)


def _decide(make_policy: MakePolicy, inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """The lengths two copies of the policy give for `conf` and `changed` after the warm-up."""
    table = inst.sps

    def sps(b):
        return table[np.asarray(b)]

    def step(conf: np.ndarray) -> StepContext:
        return sps_step(sps, conf.shape[0], conf.shape[1], len(table) - 1)

    policy = make_policy(inst.sla_tps)
    for conf, truth in inst.warmup:
        lengths = np.asarray(ask(policy, conf, sps, truth, step(conf)))
        observe = policy_traits(policy).observe
        if observe is not None:
            observe(lengths, np.minimum(lengths, truth))
    twin = copy.deepcopy(policy)
    return (
        np.asarray(ask(policy, inst.conf, sps, inst.truth, step(inst.conf))),
        np.asarray(ask(twin, inst.changed, sps, inst.truth, step(inst.changed))),
    )


def violation(make_policy: MakePolicy, inst: Instance) -> Counterexample | None:
    a, b = _decide(make_policy, inst)
    r, d = inst.request, inst.draft
    return Counterexample(inst, a, b) if min(a[r], d) != min(b[r], d) else None


def _shrink(make_policy: MakePolicy, found: Counterexample) -> Counterexample:
    """Drop the SLA, earlier rounds, other requests and trailing drafts while the property
    still fails."""
    progress = True
    while progress:
        progress = False
        inst = found.instance
        r, gamma = inst.conf.shape
        options = [replace(inst, sla_tps=None)] if inst.sla_tps is not None else []
        options += [replace(inst, warmup=inst.warmup[:-1])] if inst.warmup else []
        for row in range(r):
            if row != inst.request:
                keep = np.arange(r) != row
                options.append(
                    replace(
                        inst,
                        conf=inst.conf[keep],
                        changed=inst.changed[keep],
                        truth=inst.truth[keep],
                        request=inst.request - (row < inst.request),
                    )
                )
        if gamma > inst.draft + 1:
            options.append(
                replace(
                    inst,
                    conf=inst.conf[:, :-1],
                    changed=inst.changed[:, :-1],
                    truth=np.minimum(inst.truth, gamma - 1),
                    warmup=[(c[:, :-1], np.minimum(t, gamma - 1)) for c, t in inst.warmup],
                )
            )
        for option in options:
            smaller = violation(make_policy, option)
            if smaller is not None:
                found, progress = smaller, True
                break
    return found


def instance_count(trials: int, sla_factors: tuple[float | None, ...] = SLA_FACTORS) -> int:
    """How many instances `check_property` runs when every one passes (its size, before it
    starts)."""
    return MAX_REQUESTS * (MAX_GAMMA - 1) * trials * len(sla_factors)


def check_property(
    make_policy: MakePolicy,
    trials: int = 30,
    seed: int = 0,
    sla_factors: tuple[float | None, ...] = SLA_FACTORS,
) -> tuple[int, Counterexample | None]:
    """Run `trials` instances per (requests, gamma) size and SLA setting, smallest sizes first;
    returns the number run and the first counterexample (shrunk), if any."""
    rng = np.random.default_rng(seed)
    runs = 0
    for r in range(1, MAX_REQUESTS + 1):
        for gamma in range(2, MAX_GAMMA + 1):
            for _ in range(trials):
                for factor in sla_factors:
                    runs += 1
                    found = violation(make_policy, random_instance(rng, r, gamma, factor))
                    if found is not None:
                        return runs, _shrink(make_policy, found)
    return runs, None


# -- the outcome on the toy vocabulary ----------------------------------------------------------
VOCAB, GAMMA, OUT_LEN, BATCH = 4, 3, 3, 2
# Conditional confidence of the next draft given the previous token (index VOCAB: the start).
TOY_CONF = np.array([0.95, 0.15, 0.8, 0.5, 0.9])


def concave(batch_tokens):
    """Steps per second of a toy round verifying B tokens: slows down smoothly as B grows."""
    return 1.0 / (1.0 + 0.12 * np.asarray(batch_tokens, dtype=np.float64))


# A cliff after one extra token, then flat: long blocks can pay when short ones do not, which
# is where a search without early stop looks ahead (docs/design.md, The losslessness rule).
CLIFF = np.array([np.nan, np.nan, 1.0, 0.9, 0.55, 0.5, 0.5, 0.5, 0.5])
PROFILES = {"concave": concave, "cliff": CLIFF}
# (profile, SLA in tok/s): none, or one that stops dspark's admission in many rounds (on the
# cliff an SLA either never binds or stops every round at 0).
TOY_SETTINGS = (("concave", None), ("cliff", None), ("concave", 1.2), ("concave", 1.6))


def toy_decode(
    make_policy: MakePolicy, profile: str, sla_tps: float | None, n_seq: int, seed: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Decode `n_seq` toy sequences in batches of BATCH, each batch with its own policy object
    (policies keep state); returns the tokens and every round's verify lengths."""
    from dsim.models.toy_decoder import speculative_decode

    sps = PROFILES[profile]
    fn = sps if callable(sps) else (lambda b: sps[np.asarray(b)])
    policies = [make_policy(sla_tps) for _ in range(n_seq // BATCH)]
    rounds: list[np.ndarray] = []

    step = sps_step(fn, BATCH, GAMMA, BATCH * (1 + GAMMA))

    def lengths_for(states: np.ndarray) -> np.ndarray:
        conf = TOY_CONF[states]
        out = np.concatenate(
            [
                ask(p, conf[i * BATCH : (i + 1) * BATCH], fn, None, step)
                for i, p in enumerate(policies)
            ]
        )
        rounds.append(out)
        return out

    def observe(lengths: np.ndarray, accepted: np.ndarray) -> None:
        for i, p in enumerate(policies):
            hook = policy_traits(p).observe
            if hook is not None:
                part = slice(i * BATCH, (i + 1) * BATCH)
                hook(lengths[part], accepted[part])

    target, draft = toy_chains()
    out, _ = speculative_decode(
        target, draft, lengths_for, len(policies) * BATCH, OUT_LEN, GAMMA, seed, observe
    )
    return out, rounds


def toy_chains():
    """The toy target and draft Markov chains."""
    from dsim.models.toy_decoder import chain

    return chain(VOCAB, 1, 1.5), chain(VOCAB, 2, 1.5)


def check_outcome(
    make_policy: MakePolicy, n_seq: int = 24000, seed: int = 3, settings=TOY_SETTINGS
) -> list[tuple[str, float | None, float]]:
    """Chi-square p-value of the decoded first tokens for each (profile, SLA) setting."""
    from dsim.models.toy_decoder import joint_pvalue

    target, _ = toy_chains()
    results = []
    for profile, sla in settings:
        out, _ = toy_decode(make_policy, profile, sla, n_seq, seed)
        results.append((profile, sla, joint_pvalue(out, target)))
    return results
