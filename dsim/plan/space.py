"""The configurations a plan searches: per target, layout (colocated replicas or a P:D split)
x policy and its K x max_num_seqs x step token budget, each with its GPU count; those above
the GPU budget are left out before any work."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from dsim import spec_grammar
from dsim.cluster.topology import layout as check_layout
from dsim.errors import InputError
from dsim.plan.targets import Target
from dsim.run_spec import RunSpec

# Policies that draft nothing or one token whatever K is: one configuration each, not one per K.
NO_K = {"ar": 1, "mtp1": 1}
T = TypeVar("T")


def distinct(values: Sequence[T], option: str, name: Callable[[T], str] = str) -> tuple[T, ...]:
    """`values` of one axis of the search (a list option), each once: a value given twice
    would search the same configurations twice, so it is one line naming the option and the
    value (`name(v)`, also what is compared)."""
    seen: set[str] = set()
    for value in values:
        if name(value) in seen:
            raise InputError(None, None, f"{option}: {name(value)} given twice; give each once")
        seen.add(name(value))
    return tuple(values)


@dataclass(frozen=True)
class Layout:
    """Colocated `replicas`, or `disagg` P:D (prefill-only and decode replicas)."""

    replicas: int = 1
    disagg: str | None = None

    @property
    def split(self) -> tuple[int, int]:
        """(prefill replicas, decode replicas); (0, replicas) colocated."""
        if self.disagg is None:
            return 0, self.replicas
        return spec_grammar.pair(self.disagg, "--disagg")

    @property
    def instances(self) -> int:
        return sum(self.split)

    @property
    def label(self) -> str:
        if self.disagg is not None:
            return f"disagg {self.disagg}"
        return f"{self.replicas} replica{'s' * (self.replicas != 1)}"


@dataclass(frozen=True)
class Config:
    """One point of the search space: what a deployment is, apart from its load."""

    target: Target
    layout: Layout
    policy: str
    gamma: int  # K: the drafts a round proposes (the most an adaptive policy verifies)
    max_seqs: int
    token_budget: int | None = None  # max_num_batched_tokens (None: the engine's own)

    @property
    def gpus(self) -> int:
        return self.layout.instances * self.target.gpus

    @property
    def label(self) -> str:
        return (
            f"{self.target.label}, {self.layout.label}, {self.policy} K{self.gamma}, "
            f"seqs {self.max_seqs}"
            + ("" if self.token_budget is None else f", budget {self.token_budget}")
        )

    def spec(self, base: RunSpec) -> RunSpec:
        """`base` (traffic, acceptance) run as this configuration, with its target's bundle
        (profile, drafter cost and kind)."""
        return replace(
            base,
            profile=self.target.profile,
            draft_cost=self.target.draft_cost,
            drafter_kind=self.target.drafter_kind,
            replicas=self.layout.replicas,
            disagg=self.layout.disagg,
            policy=self.policy,
            gamma=self.gamma,
            max_seqs=self.max_seqs,
            max_num_batched_tokens=self.token_budget,
        )


def layouts(replicas: tuple[int, ...], disagg: tuple[str, ...]) -> tuple[Layout, ...]:
    """`--replicas 1,2` and `--disagg 1:1,1:3` (each list `distinct`), each checked as a run
    checks it."""
    found = [Layout(replicas=r) for r in replicas]
    found += [Layout(disagg=d) for d in disagg]
    for lay in found:
        check_layout(lay.replicas, lay.disagg)
    return tuple(found)


def policy_runs(policies: tuple[str, ...], ks: tuple[int, ...]) -> tuple[tuple[str, int], ...]:
    """(policy, K) pairs: `fixed` is fixed:K for every K; `fixed:K` is itself at K; `ar` and
    `mtp1` once (K 1); any other policy (adaptive, a plug-in) at every K as its most drafts;
    each pair once (`fixed,fixed:3` at K 3 runs fixed:3 twice)."""
    runs: list[tuple[str, int]] = []
    for policy in policies:
        if policy in NO_K:
            runs.append((policy, NO_K[policy]))
        elif policy == "fixed":
            runs += [(f"fixed:{k}", k) for k in ks]
        elif policy.startswith("fixed:") and policy[6:].isdigit():
            runs.append((policy, max(1, int(policy[6:]))))
        else:
            runs += [(policy, k) for k in ks]
    return distinct(runs, "--policies", lambda run: f"{run[0]} at K {run[1]}")


def configs(
    targets: list[Target],
    lays: tuple[Layout, ...],
    runs: tuple[tuple[str, int], ...],
    max_seqs: tuple[int, ...],
    token_budgets: tuple[int | None, ...],
    budget: int,
) -> list[Config]:
    """Every configuration within `budget` GPUs; none within it is one line naming the
    smallest configuration and its GPUs."""
    every = [
        Config(t, lay, policy, k, seqs, tokens)
        for t in targets
        for lay in lays
        for policy, k in runs
        for seqs in max_seqs
        for tokens in token_budgets
    ]
    kept = [c for c in every if c.gpus <= budget]
    if not kept:
        small = min(every, key=lambda c: c.gpus)
        raise InputError(
            None,
            None,
            f"no configuration fits a budget of {budget} GPU{'s' * (budget != 1)}: the "
            f"smallest ({small.target.label}, {small.layout.label}) needs {small.gpus}; "
            "raise --budget, or search smaller layouts (--replicas 1) or --tp",
        )
    return kept
