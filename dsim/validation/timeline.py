"""The study's time: its total projected from what it has measured so far, and the budget a
re-run must fit in.

Every phase of a study is a fixed amount of work (the profile's grid and repeats, the
calibration's bursts, runs of a fixed number of requests at fixed busy fractions, whose rates
the simulator sets from this machine's own profile), so on a slower core each phase takes
longer in about the same proportion: the profiling phase predicts the rest. As soon as it ends,
each later phase is projected as a fixed share of it (what a default study's phases took, in
shares of its profiling phase); once runs are measured, a run still to come costs their mean.
On a slower machine the runs are sized to the budget: a run's time is proportional to its
requests, so the first projection sets how many each run serves (down to MIN_REQUESTS_SHARE of
the requested number, never fewer: below it a run's queueing is too noisy to judge).
The one thing that adds work on a jumpier machine is a re-run (`dsim.validation.drift`), so a
re-run is served only while the projected total with it stays within the budget: the verdict
comes on time, and a drifted triple kept for want of time is kept drifted (the study says so).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

BUDGET_MINUTES = 22.0  # the default budget: a verdict within 25 minutes, with room to spare
# A default study's phases after profiling, in shares of its profiling phase (model load,
# drafter and target profiles): calibration 54-59 s, rate rule 7 s and a run (real and both
# simulations) 35.7 s on average, against 146-150 s of profiling, on a 2-core Xeon.
CALIBRATE_SHARE = 0.38  # for the default policies; it serves bursts per policy
RATE_RULE_SHARE = 0.05
RUN_SHARE = 0.24  # one run of the default requests; it serves requests x their tokens
MIN_REQUESTS_SHARE = 0.8  # runs shortened to fit the budget keep at least this share


def clock(seconds: float) -> str:
    """Seconds as 12m05s."""
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


@dataclass
class Timeline:
    """The study's projected total: elapsed time, plus the phases still ahead (estimated from
    the profiling phase), plus the runs still to come at the mean measured run (or, before the
    first, at the profiling phase's share). `now` and `utc_now` are the clocks (tests fake
    them)."""

    started: float  # `now()` when the study started
    budget_s: float
    runs_total: int
    now: Callable[[], float] = time.perf_counter
    utc_now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    ahead: dict[str, float] = field(default_factory=dict)  # estimated seconds per phase
    prior_run_s: float = float("nan")  # a run before any is measured
    runs: list[float] = field(default_factory=list)  # measured seconds of each run done
    history: list[dict] = field(default_factory=list)

    def after_profiling(self, profile_s: float, calibrate: float, run: float) -> str:
        """Estimate what is ahead from the profiling phase's `profile_s` (`calibrate` and `run`
        scale the default study's shares to this one's policies and requests)."""
        self.ahead = {
            "calibrate": profile_s * CALIBRATE_SHARE * calibrate,
            "rate rule": profile_s * RATE_RULE_SHARE,
        }
        self.prior_run_s = profile_s * RUN_SHARE * run
        return self.record("after profiling")

    def sized_requests(self, requests: int) -> int:
        """The most requests per run, from `requests` down to MIN_REQUESTS_SHARE of it, whose
        projection fits the budget (a run costs in proportion to its requests), or that floor
        when none fits; the projection's runs take the chosen size."""
        floor = max(1, math.ceil(MIN_REQUESTS_SHARE * requests))
        per_request = self.prior_run_s / requests
        spare = self.budget_s - (self.now() - self.started) - sum(self.ahead.values())
        fit = math.floor(spare / (self.runs_total * per_request)) if per_request > 0 else requests
        chosen = min(requests, max(floor, fit))
        self.prior_run_s = per_request * chosen
        return chosen

    def phase_done(self, phase: str) -> None:
        """A phase before the runs has ended: its time is in the elapsed time now."""
        self.ahead.pop(phase, None)

    def run_done(self, seconds: float) -> str:
        """A run (real and its simulations) took `seconds`: the projection now, in one line."""
        self.runs.append(seconds)
        return self.record(f"after run {len(self.runs)}")

    @property
    def per_run_s(self) -> float:
        return statistics.fmean(self.runs) if self.runs else self.prior_run_s

    def projected_s(self, extra_runs: int = 0) -> float:
        """Elapsed + the phases ahead + the runs left (and `extra_runs`) at `per_run_s`."""
        left = self.runs_total - len(self.runs) + extra_runs
        return self.now() - self.started + sum(self.ahead.values()) + left * self.per_run_s

    def fits(self, extra_runs: int) -> bool:
        """Whether `extra_runs` more runs (a re-run) keep the projection within the budget."""
        return self.projected_s(extra_runs) <= self.budget_s

    def record(self, when: str) -> str:
        """Keep the projection now in `history` and say it in one line."""
        elapsed, total = self.now() - self.started, self.projected_s()
        end = self.utc_now() + dt.timedelta(seconds=total - elapsed)
        basis = "measured" if self.runs else "from the profiling phase"
        self.history.append(
            {
                "when": when,
                "elapsed_s": elapsed,
                "runs_done": len(self.runs),
                "runs_total": self.runs_total,
                "per_run_s": self.per_run_s,
                "projected_total_s": total,
                "projected_end_utc": end.strftime("%Y-%m-%d %H:%M:%S"),
            }
        )
        return (
            f"projected total {clock(total)}, ending ~{end:%H:%M:%S} UTC: {clock(elapsed)} "
            f"elapsed, {len(self.runs)}/{self.runs_total} runs done, {self.per_run_s:.1f} s a "
            f"run ({basis}); budget {clock(self.budget_s)}"
        )

    def summary(self) -> str:
        """The report's line: the first projection, the last, and the budget."""
        first, last = self.history[0], self.history[-1]
        return (
            f"{clock(first['projected_total_s'])} {first['when']}, "
            f"{clock(last['projected_total_s'])} {last['when']} (budget {clock(self.budget_s)})"
        )
