"""A finished search read per tier: each configuration's highest load meeting it, the rate it
serves there per GPU, and the GPUs that copies of it need for the target rate (copies behind a
load balancer that splits the traffic evenly, each serving its share as it served the grid's
load); the winner; and, for a tier nothing meets, the configuration that came closest."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dsim import spec_grammar
from dsim.plan.search import Curve
from dsim.plan.tiers import Tier


@dataclass(frozen=True)
class Answer:
    tier: Tier
    curve: Curve
    index: int | None  # the highest grid index meeting the tier (None: none)
    rate: float  # req/s served there (NaN: none)
    tok_s: float  # output tok/s there, mean over seeds
    closest: tuple[float, str]  # (shortfall, what is missed) at the lowest load run
    usage: float = math.nan  # the tightest bound's share of its limit there, worst seed

    @property
    def load(self) -> float:
        return math.nan if self.index is None else self.curve.loads[self.index]

    @property
    def at_top(self) -> bool:
        """Met at the grid's top: the bracket was no bound, the answer only a floor."""
        return self.index == len(self.curve.loads) - 1

    @property
    def step(self) -> float:
        """The bisection's step at the answer: the next grid load over this one, less 1."""
        i, loads = self.index, self.curve.loads
        return math.nan if i is None or i + 1 >= len(loads) else loads[i + 1] / loads[i] - 1


def _mean(rows: list[dict], key: str) -> float:
    return float(np.mean([float(r[key]) for r in rows]))


def answer(curve: Curve, tier: Tier, seeds: int, closed: bool) -> Answer:
    """`curve` read for `tier`; closed loop the rate is the requests served per second at
    the best concurrency, open loop the rate offered."""
    best = curve.best(tier, seeds)
    lowest = curve.runs[min(curve.runs)]
    miss = max(((tier.shortfall(r), tier.missed(r)) for r in lowest), key=lambda m: m[0])
    if best is None:
        return Answer(tier, curve, None, math.nan, math.nan, miss)
    rows = curve.runs[best]
    rate = _mean(rows, "request_throughput_req_s") if closed else curve.loads[best]
    usage = max(tier.usage(r) for r in rows)
    return Answer(tier, curve, best, rate, _mean(rows, "throughput_tok_s"), miss, usage)


def _drafter(draft_cost: str) -> str:
    """A drafter profile by its file name (estimates lie in the plan's profiles/), else as
    given."""
    return Path(draft_cost).name if spec_grammar.draft_cost(draft_cost).profile else draft_cost


def table(answers: list[Answer], target_rate: float | None, budget: int) -> pd.DataFrame:
    """One row per tier and configuration, best first within each tier: by GPUs for the
    target rate when there is one, else by rate per GPU, and among equals (the grid's load
    steps make ties) the one further inside its tightest bound there; those that miss the tier
    after, the closest first."""
    rows = []
    for a in answers:
        c = a.curve.config
        copies = math.ceil(target_rate / a.rate) if target_rate and a.rate > 0 else None
        rows.append({
            "tier": a.tier.name, "sla": a.tier.bounds, "config": c.label,
            "gpu": c.target.gpu, "tp": c.target.tp, "engine": c.target.engine,
            "draft_cost": _drafter(c.target.draft_cost), "drafter_kind": c.target.drafter_kind,
            "layout": c.layout.label, "policy": c.policy, "k": c.gamma,
            "max_num_seqs": c.max_seqs, "gpus": c.gpus, "met": a.index is not None,
            "max_load": a.load, "step": a.step, "at_bracket_top": a.at_top,
            "rate_req_s": a.rate, "rate_per_gpu": a.rate / c.gpus,
            "tok_s": a.tok_s, "tok_s_per_gpu": a.tok_s / c.gpus,
            "bound_usage": a.usage, "copies_for_target": copies,
            "gpus_for_target": None if copies is None else copies * c.gpus,
            "within_budget": copies is not None and copies * c.gpus <= budget,
            "shortfall": a.closest[0], "misses_at_lowest_load": a.closest[1],
        })  # fmt: skip
    df = pd.DataFrame(rows).astype({"copies_for_target": "Int64", "gpus_for_target": "Int64"})
    rank = pd.DataFrame({
        "tier": df["tier"].map({t: i for i, t in enumerate(dict.fromkeys(df["tier"]))}),
        "unmet": ~df["met"],
        "gpus": df["gpus_for_target"].astype(float) if target_rate else 0.0,
        "per_gpu": -df["rate_per_gpu"],
        "usage": df["bound_usage"],  # equal loads: the most room left first
        "shortfall": df["shortfall"],  # a tier's unmet configurations: the closest first
    })  # fmt: skip
    order = rank.sort_values(list(rank.columns), kind="stable", na_position="last").index
    return df.loc[order].reset_index(drop=True)


def winner(rows: pd.DataFrame, target_rate: float | None) -> pd.Series | None:
    """A tier's best row (`rows` in `table` order): the fewest GPUs for the target within the
    budget, else the most rate per GPU, then the most room inside the tier's tightest bound;
    None when no configuration meets the tier."""
    met = rows[rows["met"]]
    if target_rate:
        met = met[met["within_budget"]]
    return None if met.empty else met.iloc[0]


def unmet(rows: pd.DataFrame, target_rate: float | None, budget: int) -> str | None:
    """Why a tier (`rows`) has no `winner`, as report.md and the terminal both say it: none
    meets it, or none serves the target rate within the budget; None when it has one."""
    if winner(rows, target_rate) is not None:
        return None
    if rows["met"].any():
        return (f"no configuration meets it for {target_rate:g} req/s within {budget} "
                f"GPU{'s' * (budget != 1)}")  # fmt: skip
    return "no configuration meets it"


def closest(rows: pd.DataFrame) -> pd.Series:
    """The configuration nearest to a tier none meets: the smallest shortfall at its lowest
    load."""
    return rows.loc[rows["shortfall"].astype(float).idxmin()]
