"""The one size gate of `dsim run` and `dsim pareto`: huge work is stated, and started only on
`--yes`.

Work above MAX_POINTS points, MAX_REQUESTS simulated requests or an estimated MAX_SECONDS is
refused (one line with its size and the estimate, exit 2) unless the user passes `--yes`; there
is no prompt, so a script without a terminal behaves the same. Work above NOTE_SECONDS is
started with one line saying its size and estimate, so nothing long starts without a word.

The estimate is points x SECONDS_PER_POINT + requests x SECONDS_PER_REQUEST, divided over the
workers. Both figures were measured on the project's 2-core VM (benchmarks/README.md, "The
size gate's figures"); a policy, a profile or a busier machine can make a run several times
faster or slower, so the figure is an estimate, said as one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dsim.errors import InputError
from dsim.run_inputs import load_spec_workload
from dsim.workload import Workload, load_workload

if TYPE_CHECKING:
    from dsim.pareto.config import SweepConfig

MAX_POINTS = 10_000
MAX_REQUESTS = 5_000_000
MAX_SECONDS = 2 * 3600.0
NOTE_SECONDS = 600.0  # ten minutes: shorter work shows its progress bar alone
# One simulated request, one process: bench_cluster.py's million requests took 487.8 s of CPU
# (dspark, 32 replicas, commit 9d97f3f, 2026-12-02; bench_sim.py's idle dspark run of the Azure
# conv trace, 15.3-16.1 s for 19,366 requests with start-up, is the same order).
SECONDS_PER_REQUEST = 4.9e-4
# One sweep point's own cost beyond its requests (resolving its inputs, writing its folder):
# 400 points of 20 requests took 18.5 s against 3.9 s for 40 (jobs 1, 2026-12-03).
SECONDS_PER_POINT = 0.03
YES = typer.Option(
    False,
    "--yes",
    help=f"Start work above {MAX_POINTS:,} points, {MAX_REQUESTS / 1e6:g}M simulated requests "
    f"or an estimated {MAX_SECONDS / 3600:g} h (refused without it: exit 2, no prompt).",
)
SAMPLE = 64  # sweeps with more distinct workloads count this many, evenly spaced, and scale


@dataclass(frozen=True)
class WorkSize:
    """How big a command's work is: points, simulated requests, and the workers sharing it."""

    what: str  # "this run", "this sweep"
    points: int
    requests: int
    workers: int = 1
    sampled: bool = False  # requests scaled from a sample of the points' workloads

    @property
    def estimate_s(self) -> float:
        work = self.points * SECONDS_PER_POINT + self.requests * SECONDS_PER_REQUEST
        return work / max(1, min(self.workers, self.points))

    def over(self) -> list[str]:
        """The limits this work is above, as they read in the message."""
        limits = [
            (self.points > MAX_POINTS, f"{MAX_POINTS:,} points"),
            (self.requests > MAX_REQUESTS, f"{MAX_REQUESTS:,} simulated requests"),
            (self.estimate_s > MAX_SECONDS, duration(MAX_SECONDS)),
        ]
        return [text for above, text in limits if above]

    def describe(self) -> str:
        about = "about " if self.sampled else ""
        workers = f" on {self.workers} workers" if self.workers > 1 else ""
        return (
            f"{self.what} is {self.points:,} point{'s' * (self.points != 1)} and {about}"
            f"{self.requests:,} simulated requests, an estimated {duration(self.estimate_s)}"
            f"{workers} ({SECONDS_PER_REQUEST * 1e3:g} ms a request, {SECONDS_PER_POINT:g} s "
            "a point, as measured on a 2-core VM)"
        )


def duration(seconds: float) -> str:
    """A duration the way a person says it: 45 s, 17 min, 3.2 h, 75 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.2g} h" if seconds < 36000 else f"{seconds / 3600:,.0f} h"


def check_size(size: WorkSize, yes: bool, where: str | Path | None = None) -> None:
    """Refuse work above a limit unless `yes` (an InputError: one line, exit 2); say the size of
    any work that is long or allowed past a limit before it starts."""
    over = size.over()
    if over and not yes:
        raise InputError(
            where, None, f"{size.describe()}: above {_listed(over)}; pass --yes to start it"
        )
    if over or size.estimate_s > NOTE_SECONDS:
        started = " (--yes)" if over else ""
        print(f"dsim: note: {size.describe()}; starting{started}", file=sys.stderr)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def run_size(workload: Workload) -> WorkSize:
    """One simulation of `workload`."""
    return WorkSize("this run", 1, len(workload))


def sweep_size(cfg: SweepConfig, workers: int) -> WorkSize:
    """A sweep's points and requests, from its config alone (before a spec is built per point).

    Its policies and layouts share each (load, seed)'s workload; each distinct workload is
    counted (each trace read once) or, past SAMPLE of them, an even sample scaled to all."""
    axis_rate = cfg.load_axis == "rate_scale"
    synthetic = cfg.base.trace.startswith("synthetic")
    keys = [
        (load if axis_rate else cfg.base.rate_scale, seed if synthetic else 0)
        for load in cfg.loads
        for seed in cfg.seeds
    ]  # (rate scale, seed): all a point's workload depends on beyond the base spec
    counts: dict[tuple[float, int], int] = dict.fromkeys(keys, 0)
    chosen = list(counts)
    if len(chosen) > SAMPLE:
        chosen = [chosen[i * len(chosen) // SAMPLE] for i in range(SAMPLE)]
    trace = cache(lambda seed: load_workload(cfg.base.trace, seed))
    for rate, seed in chosen:
        spec = replace(cfg.base, rate_scale=rate, seed=seed)
        counts[rate, seed] = len(load_spec_workload(spec, trace(seed)))
    sampled = len(chosen) < len(counts)
    per_key = sum(counts[k] for k in chosen) / len(chosen) if sampled else None
    requests = sum(counts[k] if per_key is None else per_key for k in keys)
    repeats = len(cfg.policies) * max(1, len(cfg.layouts))
    return WorkSize("this sweep", len(keys) * repeats, round(requests * repeats), workers, sampled)
