"""The one size gate of `dsim run`, `dsim pareto`, `dsim plan` and `dsim check-policy`: huge
work is stated, and started only on `--yes`.

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dsim.errors import InputError

if TYPE_CHECKING:
    from dsim.workload import Workload

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
# `dsim check-policy`, dspark on a 2-core VM (2026-12-06): 36,000 random instances of the
# property check in 11.3 s; 96,000 toy sequences in each of the 4 chi-square settings in 22 s.
SECONDS_PER_INSTANCE = 3.1e-4
SECONDS_PER_TOY_SEQUENCE = 5.7e-5
YES = typer.Option(
    False,
    "--yes",
    help=f"Start work above {MAX_POINTS:,} points, {MAX_REQUESTS / 1e6:g}M simulated requests "
    f"or an estimated {MAX_SECONDS / 3600:g} h (refused without it: exit 2, no prompt).",
)


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
    _gate(size.describe(), size.over(), size.estimate_s, yes, where)


def check_time(what: str, estimate_s: float, yes: bool) -> None:
    """`check_size` for work not counted in simulated requests (`dsim check-policy`'s random
    instances and toy sequences): its one limit is the estimated time."""
    over = [duration(MAX_SECONDS)] if estimate_s > MAX_SECONDS else []
    _gate(f"{what}, an estimated {duration(estimate_s)}", over, estimate_s, yes, None)


def _gate(described: str, over: list[str], estimate_s: float, yes: bool, where) -> None:
    if over and not yes:
        raise InputError(where, None, f"{described}: above {_listed(over)}; pass --yes to start it")
    if over or estimate_s > NOTE_SECONDS:
        started = " (--yes)" if over else ""
        print(f"dsim: note: {described}; starting{started}", file=sys.stderr)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def run_size(workload: Workload) -> WorkSize:
    """One simulation of `workload`."""
    return WorkSize("this run", 1, len(workload))
