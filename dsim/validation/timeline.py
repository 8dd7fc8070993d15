"""The study's time: its total projected from what it has measured so far, and the budget a
re-run must fit in.

Every phase of a study is a fixed amount of work (the profile's grid and repeats, the
calibration's bursts, runs of a fixed number of requests at fixed busy fractions, whose rates
the simulator sets from this machine's own profile), so on a slower core each phase takes
longer in about the same proportion: the profiling phase predicts the rest. As soon as it ends,
each later phase is projected as a fixed share of it (what a default study's phases took, in
shares of its profiling phase). The loads' runs differ: real mode's clock skips the gaps
between arrivals, so a run takes its passes' time, and a light load batches less and steps
more (on a 2-core EPYC its runs took 1.17-1.20x a moderate load's, 1.08-1.12x on a Xeon). So
once the rate rule has set the loads' rates, each load's runs are weighed by a run's
simulated busy seconds there (over the policies and repeats, `plan.run_busy_s`), and once runs
are measured, a run still to come costs its weight at what a unit of weight cost them.
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
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

BUDGET_MINUTES = 22.0  # the default budget: a verdict within 25 minutes, with room to spare
# A default study's phases after profiling, in shares of its profiling phase (model load,
# drafter and target profiles): calibration 54-59 s, rate rule 7 s and a run (real and both
# simulations) 35.7 s on average, against 146-150 s of profiling, on a 2-core Xeon, with
# no focus rounds in the profile (`dsim.validation.profiles.FOCUS`): the phase is taken
# without them (`study.study_timeline`), since the later phases do not scale with them. A run's
# simulations became 32 acceptance draws each after that (`Settings.draws`): 2.1 s more a run
# on a 2-core EPYC whose profiling phase without the focus rounds took about 172 s, +0.012.
CALIBRATE_SHARE = 0.38  # for the default policies; it serves bursts per policy
RATE_RULE_SHARE = 0.05
RUN_SHARE = 0.25  # one run of the default requests; it serves requests x their tokens
MIN_REQUESTS_SHARE = 0.8  # runs shortened to fit the budget keep at least this share


def clock(seconds: float) -> str:
    """Seconds as 12m05s."""
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


@dataclass
class Timeline:
    """The study's projected total: elapsed time, plus the phases still ahead (estimated from
    the profiling phase), plus the runs still to come, each at its load's weight (a run's
    simulated busy seconds there, from the rate rule; equal before it) times the seconds a unit
    of weight has cost the runs measured so far (before the first, the profiling phase's run
    share). `now` and `utc_now` are the clocks (tests fake them)."""

    started: float  # `now()` when the study started
    budget_s: float
    planned: dict[str, int]  # runs per load, in the order served (a re-run adds to its load)
    now: Callable[[], float] = time.perf_counter
    utc_now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    ahead: dict[str, float] = field(default_factory=dict)  # estimated seconds per phase
    prior_run_s: float = float("nan")  # the mean run before any is measured
    weights: dict[str, float] = field(default_factory=dict)  # per load; none: all weigh 1
    runs: list[tuple[str, float]] = field(default_factory=list)  # (load, seconds) of each done
    history: list[dict] = field(default_factory=list)

    @property
    def runs_total(self) -> int:
        return sum(self.planned.values())

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

    def weigh_loads(self, weights: dict[str, float]) -> str:
        """Weigh each load's runs by `weights` (a run's simulated busy seconds there) from now
        on, since a run's time is its passes': the projection now, in one line."""
        if sorted(weights) != sorted(self.planned) or not all(w > 0 for w in weights.values()):
            raise ValueError(f"every load of {sorted(self.planned)} needs a weight > 0: {weights}")
        self.weights = dict(weights)
        return self.record("after the rate rule")

    def add_runs(self, load: str, runs: int) -> None:
        """`runs` more runs at `load` (a re-run)."""
        self.planned[load] += runs

    def run_done(self, load: str, seconds: float) -> str:
        """A run at `load` (real and its simulations) took `seconds`: the projection now, in one
        line."""
        self.runs.append((load, seconds))
        return self.record(f"after run {len(self.runs)}")

    def _weight(self, load: str) -> float:
        return self.weights.get(load, 1.0)

    def run_s(self, load: str) -> float:
        """A run still to come at `load`: its weight at the seconds a unit of weight cost the
        runs measured so far, or, before any, at the prior run over the planned runs' mean
        weight (so the prior's total stays the profiling phase's estimate)."""
        if self.runs:
            measured = sum(self._weight(done) for done, _ in self.runs)
            per_weight = sum(s for _, s in self.runs) / measured
        else:
            planned = sum(n * self._weight(name) for name, n in self.planned.items())
            per_weight = self.prior_run_s * self.runs_total / planned
        return per_weight * self._weight(load)

    def left_s(self, extra: dict[str, int] | None = None) -> float:
        """The phases ahead + the runs left (and `extra` runs per load) at `run_s`."""
        done = Counter(load for load, _ in self.runs)
        left = Counter({load: n - done[load] for load, n in self.planned.items()})
        left.update(extra or {})
        return sum(self.ahead.values()) + sum(n * self.run_s(load) for load, n in left.items())

    def projected_s(self, extra: dict[str, int] | None = None) -> float:
        """Elapsed + what is left (`left_s`)."""
        return self.now() - self.started + self.left_s(extra)

    def fits(self, extra: dict[str, int]) -> bool:
        """Whether `extra` runs per load (a re-run) keep the projection within the budget."""
        return self.projected_s(extra) <= self.budget_s

    def record(self, when: str) -> str:
        """Keep the projection now in `history` and say it in one line."""
        elapsed = self.now() - self.started
        total = elapsed + self.left_s()
        end = self.utc_now() + dt.timedelta(seconds=total - elapsed)
        basis = "measured" if self.runs else "from the profiling phase"
        if self.weights:
            basis += ", loads weighed by their simulated busy time"
        per_run = {load: self.run_s(load) for load in self.planned}
        self.history.append(
            {
                "when": when,
                "elapsed_s": elapsed,
                "runs_done": len(self.runs),
                "runs_total": self.runs_total,
                "per_run_s": per_run,
                "projected_total_s": total,
                "projected_end_utc": end.strftime("%Y-%m-%d %H:%M:%S"),
            }
        )
        runs = " / ".join(f"{load} {s:.1f} s" for load, s in per_run.items())
        return (
            f"projected total {clock(total)}, ending ~{end:%H:%M:%S} UTC: {clock(elapsed)} "
            f"elapsed, {len(self.runs)}/{self.runs_total} runs done, a run {runs} ({basis}); "
            f"budget {clock(self.budget_s)}"
        )

    def summary(self) -> str:
        """The report's line: the first projection, the last, and the budget."""
        first, last = self.history[0], self.history[-1]
        return (
            f"{clock(first['projected_total_s'])} {first['when']}, "
            f"{clock(last['projected_total_s'])} {last['when']} (budget {clock(self.budget_s)})"
        )
