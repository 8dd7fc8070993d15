"""Reference passes: the core's speed measured inside every real run, next to the passes it
prices.

On a shared or virtual machine the core's speed wanders by 10-30% within a minute, more than
bursts served a minute away from a run, or one factor for a whole run, can follow
(the validation study's README). So every `every`-th verify of a real run first times one
extra target pass of a fixed shape (REFERENCE_TOKENS tokens of one sequence over
REFERENCE_CONTEXT cached, on a KV slot of its own), stamped with the engine time of the step it
falls in, and the run's wall clock is paused around it (`PausableTime`), so no step of the run
pays for it. The passes make the run's *speed trace*: at each pass, the median of the WINDOW
passes centred on it over the calibration's median reference pass. A simulation of the run
lasts each step the engine-calibrated profile's price (k x latency + o) times the trace at the
step's start (`TraceClock`; the whole step, since the engine's host work runs on the same core),
so the machine's speed is priced as it moved, and the run's own passes never enter it.

What a trace cannot follow is a core that changes faster than its window: a run's *unfollowed
drift* is the mean |pass / (median of its WINDOW - 1 neighbours) - 1| over its passes, each pass
judged against a trace it took no part in. A run's drift, the median pass of its last third
over its first third, minus 1, is reported beside it: what one factor for the whole run could
not have followed. So is its *trace gap*, the trace's mean over the passes' mean, minus 1:
the trace is a running median, so it prices a core that jitters evenly about its speed at that
speed, but a core whose passes are now and then slowed (preempted) below what the run's steps,
which pay every slow-down, cost on average; the unfollowed drift reads both alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from dsim.engine.clock import WallClock
from dsim.validation.step_check import PassClocks

REFERENCE_TOKENS = 2  # one sequence's verify block (an anchor and a draft)
REFERENCE_CONTEXT = 128  # tokens it attends to
WINDOW = 5  # reference passes a point of the speed trace is the median of (centred)


class PausableTime:
    """`perf_counter` less the time spent paused: the time source of a run's `WallClock`."""

    def __init__(self) -> None:
        self.paused = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.paused


@dataclass(frozen=True)
class Samples:
    """The reference passes of one run (or of the calibration): seconds on both clocks and
    the engine time of the step each fell in, in the order they were timed."""

    wall: tuple[float, ...]
    cpu: tuple[float, ...]
    at: tuple[float, ...]

    @property
    def median_wall(self) -> float:
        return statistics.median(self.wall) if self.wall else float("nan")

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu) if self.cpu else float("nan")

    def drift(self, clock: str = "wall") -> float:
        """Median of the last third over the first third, minus 1 (0 with under 3 passes)."""
        times = self.wall if clock == "wall" else self.cpu
        third = len(times) // 3
        if not third:
            return 0.0
        return statistics.median(times[-third:]) / statistics.median(times[:third]) - 1

    def unfollowed(self, clock: str = "wall") -> float:
        """Mean |pass / (median of its neighbours in the window) - 1| (module doc): how far
        the core moved faster than the trace can follow (0 with under 3 passes)."""
        times = self.wall if clock == "wall" else self.cpu
        if len(times) < 3:
            return 0.0
        return statistics.fmean(
            abs(t / statistics.median(_window(times, j, own=False)) - 1)
            for j, t in enumerate(times)
        )

    def gap(self) -> float:
        """The trace's mean over the passes' mean on the wall clock, minus 1 (module doc; 0
        without passes)."""
        if not self.wall:
            return 0.0
        trace = [statistics.median(_window(self.wall, j, own=True)) for j in range(len(self.wall))]
        return statistics.fmean(trace) / statistics.fmean(self.wall) - 1

    def trace(self, calibration: Samples) -> SpeedTrace:
        """The run's speed trace against the calibration's reference (module doc); a run too
        short to reach its first pass (under `every` verifies) runs at the calibration's."""
        times = self.wall
        if not times:
            return SpeedTrace(np.zeros(1), np.ones(1))
        speed = [
            statistics.median(_window(times, j, own=True)) / calibration.median_wall
            for j in range(len(times))
        ]
        return SpeedTrace(np.asarray(self.at, np.float64), np.asarray(speed, np.float64))

    def record(self) -> dict[str, Any]:
        """What a run's diagnostics keep of it."""
        return {
            "passes": len(self.wall),
            "median_wall_ms": 1e3 * self.median_wall,
            "median_cpu_ms": 1e3 * self.median_cpu,
            "drift": self.drift("wall"),
            "cpu_drift": self.drift("cpu"),
            "unfollowed": self.unfollowed("wall"),
            "cpu_unfollowed": self.unfollowed("cpu"),
            "trace_gap": self.gap(),
        }


def _window(times: tuple[float, ...], j: int, own: bool) -> tuple[float, ...]:
    """The passes of the WINDOW centred on pass j (fewer at the ends), with or without j."""
    half = WINDOW // 2
    return times[max(0, j - half) : j] + times[j : j + 1] * own + times[j + 1 : j + half + 1]


@dataclass(frozen=True)
class SpeedTrace:
    """The core's speed through a run relative to the calibration's (1.0: as fast), at the
    engine times of its reference passes; between two passes the nearer one holds."""

    at: np.ndarray  # (P,) engine seconds of each pass, non-decreasing
    speed: np.ndarray  # (P,) the window's median pass over the calibration's median

    def __post_init__(self) -> None:
        if not len(self.at):
            raise ValueError("a speed trace needs at least one reference pass")

    @cached_property
    def edges(self) -> np.ndarray:
        """(P - 1,) engine times where the nearer pass changes."""
        return (self.at[1:] + self.at[:-1]) / 2

    def __call__(self, t: np.ndarray | float) -> np.ndarray:
        """The speed at engine times `t`: (n,) -> (n,)."""
        return self.speed[np.searchsorted(self.edges, t, side="right")]

    def clock(self) -> TraceClock:
        return TraceClock(self)

    def rows(self) -> dict[str, np.ndarray]:
        return {"at_s": self.at, "speed": self.speed}

    @classmethod
    def from_rows(cls, rows: Mapping[str, Any]) -> SpeedTrace:
        """The trace back from `rows()`'s columns (a run's POLICY-reference.csv)."""
        return cls(np.asarray(rows["at_s"], np.float64), np.asarray(rows["speed"], np.float64))


class TraceClock:
    """A simulated run's clock: each step lasts the profile's price times the trace's speed at
    the step's start."""

    def __init__(self, trace: SpeedTrace) -> None:
        self.trace = trace

    def start(self, now: float) -> float:
        return now

    def seconds(self, started: float, modelled: float) -> float:
        return modelled * float(self.trace(started))


@dataclass
class Reference:
    """The reference pass of one study: timed on `clocks` every `every`-th verify of a real
    run, collected until `take`."""

    target: Any
    clocks: PassClocks
    every: int
    time: PausableTime = field(default_factory=PausableTime)
    step_at: float = 0.0  # engine time of the step now running (set by the run's clock)
    _wall: list[float] = field(default_factory=list)
    _cpu: list[float] = field(default_factory=list)
    _at: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        from dsim.models.cpu_profile import PassClock

        slot = PassClock(self.target, 1, REFERENCE_CONTEXT + REFERENCE_TOKENS)
        self._setup, self._run = slot.step([(1, REFERENCE_TOKENS, REFERENCE_CONTEXT, False)])

    def clock(self) -> WallClock:
        """A real run's clock: wall time with the reference passes left out, telling the
        reference the engine time of each step."""
        return _RunClock(self)

    def measure(self) -> None:
        """Time one reference pass, with the run's clock paused around it."""
        started = time.perf_counter()
        self._setup()
        wall, cpu = self.clocks.wall(), self.clocks.cpu()
        self._run()
        self._cpu.append(self.clocks.cpu() - cpu)
        self._wall.append(self.clocks.wall() - wall)
        self._at.append(self.step_at)
        self.time.paused += time.perf_counter() - started

    def take(self) -> Samples:
        """The passes timed since the last `take`, and a fresh start."""
        samples = Samples(tuple(self._wall), tuple(self._cpu), tuple(self._at))
        for kept in (self._wall, self._cpu, self._at):
            kept.clear()
        return samples


class _RunClock(WallClock):
    """`WallClock` on the reference's pausable time, stamping each step's engine time."""

    def __init__(self, reference: Reference) -> None:
        super().__init__(reference.time.now)
        self.reference = reference

    def start(self, now: float) -> float:
        self.reference.step_at = now
        return super().start(now)


def run_factor(pass_factor: float, run: Samples, calibration: Samples) -> float:
    """The run's median pass factor: the calibration's k moved as its median reference pass
    moved (what one factor for the whole run would price; the report's summary): k itself for
    a run without passes, as its trace (`Samples.trace`)."""
    if not run.wall:
        return pass_factor
    return pass_factor * run.median_wall / calibration.median_wall
