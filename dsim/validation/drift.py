"""The machine's drift beside every measured triple (a load and seed's runs, one per policy).

A wall-clock comparison is only as good as the pass factor it prices the runs with, and a
shared machine's speed moves by more than the targets' tolerance within minutes. So the
calibration's smallest bursts (CHECK_REQUESTS requests arriving together, per policy, the same
prompts and seed, so the same batches) are re-served right after every triple, as a *check*:
its factor is the time inside the model passes over the raw profiles' prediction for its own
batches. The check right before a triple (for the first, the calibration's own bursts of
CHECK_REQUESTS) prices it:

    k_triple = k x (check before) / (calibration's check)

(k the calibration's pass factor; the engine overhead a + b R + c V stays as fitted), and the
check right after it measures the triple's own drift, (check after) / (check before) - 1. A
triple whose drift is beyond DRIFT_TOL is served again (at most RERUNS times, and at most
RERUNS_TOTAL re-runs in the whole study, so a drifting machine cannot stretch the run without
bound), priced by the check that ended the drifted attempt and ended by a fresh one; its last
attempt is kept, and
the study is evidence only if every kept triple is within the tolerance. Checks are timed on
both `PassClocks`: the wall clock prices and judges (the runs are wall-clock runs), the
thread's CPU clock tells a busy machine (wall moves, CPU does not) from a slower core (both).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from dsim.run_spec import RunSpec
from dsim.validation.bench import Bench
from dsim.validation.bursts import serve_bursts
from dsim.validation.runs import utc
from dsim.validation.step_check import EngineCalibration, priced_totals

CHECK_REQUESTS = 2  # one of the calibration's burst sizes: its bursts are the first check
DRIFT_TOL = 0.10  # a triple whose passes sped up or slowed down more than this is re-run
RERUNS = 1  # re-runs of a drifted triple at most
RERUNS_TOTAL = 3  # re-runs in the whole study at most (a default run stays within ~25 minutes)


@dataclass(frozen=True)
class Check:
    """One check: pass factors (time in the passes / the raw profiles' prediction) on the wall
    clock and on the thread's CPU clock, where its runs lie and what it took to serve."""

    where: str
    utc: str
    wall: float
    cpu: float
    seconds: float

    @classmethod
    def of(cls, totals: list[dict], where: str, seconds: float) -> Check:
        """A check from burst runs' totals (`step_check.run_totals`)."""
        predicted = sum(t["predicted_s"] for t in totals)
        wall = sum(t["model_s"] for t in totals) / predicted
        return cls(where, utc(), wall, sum(t["model_cpu_s"] for t in totals) / predicted, seconds)


def calibration_check(cal: EngineCalibration) -> Check:
    """The first check: the calibration's own bursts of CHECK_REQUESTS."""
    return Check.of([t for t in cal.runs if t["requests"] == CHECK_REQUESTS], "calibration", 0.0)


def measure_check(bench: Bench, raw: RunSpec, folder: Path) -> Check:
    """Serve the check bursts now (runs to `folder`), priced by `raw`'s raw profiles."""
    started = time.perf_counter()
    runs = serve_bursts(bench, raw, CHECK_REQUESTS, folder)
    totals = priced_totals(runs, Path(raw.profile), Path(raw.draft_cost))
    where = str(folder.relative_to(bench.out))
    return Check.of(totals, where, time.perf_counter() - started)


def triple_calibration(cal: EngineCalibration, first: Check, before: Check) -> EngineCalibration:
    """The calibration with its pass factor moved as the check before a triple moved from
    the first check (module doc)."""
    return replace(cal, pass_factor=cal.pass_factor * before.wall / first.wall)


@dataclass(frozen=True)
class TripleDrift:
    """One attempt at a triple: the pass factor it was priced with and its two checks."""

    load: str
    seed: int
    attempt: int  # 1, then 2, ... for re-runs
    pass_factor: float  # k_triple, the factor its simulations were priced with
    before: Check
    after: Check

    @property
    def change(self) -> float:
        """The triple's own drift on the wall clock."""
        return self.after.wall / self.before.wall - 1

    @property
    def cpu_change(self) -> float:
        """The same on the thread's CPU clock."""
        return self.after.cpu / self.before.cpu - 1

    @property
    def within(self) -> bool:
        return abs(self.change) <= DRIFT_TOL

    def settled(self, reruns_left: int) -> bool:
        """Whether the triple is done: within the tolerance, out of its own re-runs, or the
        study out of re-runs (`reruns_left`, of RERUNS_TOTAL)."""
        return self.within or self.attempt > RERUNS or reruns_left <= 0

    def record(self, kept: bool) -> dict:
        """What comparison.json and the report keep of it."""
        return asdict(self) | {
            "change": self.change,
            "cpu_change": self.cpu_change,
            "within": self.within,
            "kept": kept,
        }


def verdict(records: list[dict]) -> dict:
    """The drift of the whole study: every attempt's record, and whether it is evidence
    (every kept triple within the tolerance)."""
    kept = [r for r in records if r["kept"]]
    factors = [r["before"]["wall"] for r in records] + [records[-1]["after"]["wall"]]
    return {
        "tolerance": DRIFT_TOL,
        "valid": all(r["within"] for r in kept),
        "reruns": len(records) - len(kept),
        "check_wall_range": [min(factors), max(factors)],
        "triples": records,
    }
