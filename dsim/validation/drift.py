"""The machine's drift inside every measured triple (a load and seed's runs, one per policy).

Each real run is priced by the speed trace of the reference passes timed inside it
(`dsim.validation.reference`), so the core's speed is priced as it moved, between runs and
within them. What a trace cannot follow is a core that changes faster than its window: a run's
unfollowed drift (the mean distance of each reference pass from the median of its neighbours)
on the wall clock judges it (the runs are wall-clock runs), the thread's CPU clock beside it (a
busy machine moves the wall clock alone, a slower core both). A triple with a run beyond
DRIFT_TOL is served again (at most RERUNS times, and at most RERUNS_TOTAL re-runs in the whole
study, so a drifting machine cannot stretch the run without bound); its last attempt is kept,
and the study is evidence only if every kept triple is within the tolerance. Each run's drift
from its first third to its last (what one factor per run could not follow) is reported beside.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

DRIFT_TOL = 0.10  # a run whose trace leaves more than this unfollowed: its triple re-run
RERUNS = 1  # re-runs of a drifted triple at most
RERUNS_TOTAL = 3  # re-runs in the whole study at most (a default run stays within ~25 minutes)


@dataclass(frozen=True)
class RunDrift:
    """One run of a triple: its median pass factor (k moved by its median reference pass) and
    its reference passes' drift on both clocks (`reference.Samples.record`)."""

    policy: str
    pass_factor: float
    reference: dict

    @property
    def change(self) -> float:
        return self.reference["unfollowed"]


@dataclass(frozen=True)
class TripleDrift:
    """One attempt at a triple: each run's pricing and drift."""

    load: str
    seed: int
    attempt: int  # 1, then 2, ... for re-runs
    runs: tuple[RunDrift, ...]

    @property
    def change(self) -> float:
        """The triple's unfollowed drift on the wall clock: its runs' largest."""
        return max(r.change for r in self.runs)

    @property
    def cpu_change(self) -> float:
        """The same on the thread's CPU clock."""
        return max(r.reference["cpu_unfollowed"] for r in self.runs)

    @property
    def within(self) -> bool:
        return self.change <= DRIFT_TOL

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
    factors = [run["pass_factor"] for r in records for run in r["runs"]]
    return {
        "tolerance": DRIFT_TOL,
        "valid": all(r["within"] for r in kept),
        "reruns": len(records) - len(kept),
        "pass_factor_range": [min(factors), max(factors)],
        "triples": records,
    }
