"""Bisection on load, for every configuration and tier at once, over the sweeps' cached points.

Each configuration has one load curve (its grid, `dsim.plan.grid`) that every tier reads: a
tier's bracket is the highest grid load known to meet it below the lowest known to miss it,
and its next probe the middle of that bracket, until the two are adjacent. A probe runs its
seeds in order and stops at the first that misses (a point counts only when every seed meets
the tier, as in sweeps), so a missed probe costs one seed. Each round runs every pending probe
of every configuration as one batch of sweep points (`dsim.pareto.sweep.run_sweep`: cached
under OUT/points/<key>, on processes or Ray), so a killed plan resumes from its points and a
finished one reruns in seconds. The search assumes that meeting a tier is monotone in load;
the report lists every point, so a curve that is not shows."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dsim.pareto.sweep import make_points, run_sweep
from dsim.plan.space import Config
from dsim.plan.tiers import Tier
from dsim.run_spec import RunSpec

SpecOf = Callable[[Config, float, int], RunSpec]  # (configuration, load, seed) -> its run


@dataclass
class Curve:
    """One configuration's grid and the summaries run on it, per grid index in seed order."""

    config: Config
    loads: tuple[float, ...]
    runs: dict[int, list[dict]] = field(default_factory=dict)

    def verdict(self, i: int, tier: Tier, seeds: int) -> bool | None:
        """False once a seed misses; True once all `seeds` meet; None until then."""
        done = self.runs.get(i, [])
        if any(not tier.met(s) for s in done):
            return False
        return True if len(done) == seeds else None

    def bracket(self, tier: Tier, seeds: int) -> tuple[int, int]:
        """(lo, hi): hi the lowest index known to miss (len(loads) if none), lo the highest
        index below it known to meet (-1 if none)."""
        hi = min((i for i in self.runs if self.verdict(i, tier, seeds) is False),
                 default=len(self.loads))  # fmt: skip
        lo = max((i for i in self.runs if i < hi and self.verdict(i, tier, seeds)), default=-1)
        return lo, hi

    def probe(self, tier: Tier, seeds: int) -> int | None:
        """The grid index `tier` needs run next (None: its bracket is closed)."""
        lo, hi = self.bracket(tier, seeds)
        return None if hi - lo <= 1 else (lo + hi) // 2

    def best(self, tier: Tier, seeds: int) -> int | None:
        """The highest grid index meeting `tier` (None: not even the lowest load)."""
        lo, _ = self.bracket(tier, seeds)
        return None if lo < 0 else lo


def most_probes(grid_size: int, tiers: int) -> int:
    """At most this many grid loads a curve runs: a bisection per tier over `grid_size`."""
    return tiers * math.ceil(math.log2(grid_size + 1))


def pending(
    curves: list[Curve], tiers: tuple[Tier, ...], seeds: tuple[int, ...]
) -> list[tuple[Curve, int, int]]:
    """(curve, grid index, seed) of every probe's next seed, each once."""
    wanted: dict[tuple[int, int], tuple[Curve, int, int]] = {}
    for c, curve in enumerate(curves):
        for tier in tiers:
            i = curve.probe(tier, len(seeds))
            if i is not None:
                wanted[c, i] = (curve, i, seeds[len(curve.runs.get(i, []))])
    return list(wanted.values())


def search(
    curves: list[Curve],
    tiers: tuple[Tier, ...],
    seeds: tuple[int, ...],
    spec_of: SpecOf,
    out: Path,
    executor: str = "local",
    jobs: int = 2,
    address: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Run rounds of probes until every bracket is closed; returns the points run or read."""
    total = 0
    while todo := pending(curves, tiers, seeds):
        specs = [(cur.config.policy, cur.loads[i], spec_of(cur.config, cur.loads[i], s))
                 for cur, i, s in todo]  # fmt: skip
        points = make_points(specs)
        shown = None if progress is None else (lambda n, t=total: progress(t + n))
        table = run_sweep(points, out, executor, jobs, address, shown)
        for (curve, i, _), row in zip(todo, table.to_dict("records"), strict=True):
            curve.runs.setdefault(i, []).append(row)
        total += len(points)
    return total
