"""Reference passes: the core's speed measured inside every real run, next to the passes it
prices.

On a shared or virtual machine the core's speed wanders by about 10% within a minute, more
than bursts served a minute away from a run can follow (experiments/validation/README.md). So
every `every`-th verify of a real run first times one extra target pass of a fixed shape
(REFERENCE_TOKENS tokens of one sequence over REFERENCE_CONTEXT cached, on a KV slot of its
own), and the run's wall clock is paused around it (`PausableTime`), so no step of the run pays
for it. A run is then priced with

    k_run = k x (median reference pass in the run) / (median reference pass in the calibration)

(k the calibration's pass factor; the overhead a + b R + c V as fitted): the calibration keeps
its bursts' mix of shapes, the reference follows the core within seconds, and the run's own
passes never enter its pricing. (Real mode itself schedules with the calibration's profiles,
the one profile a deployment would have; only the simulations of a run use its own factor.) A
run's drift is the median reference pass of its last third over that of its first third,
minus 1: a change the run's single factor cannot follow.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from dsim.engine.clock import WallClock
from dsim.validation.step_check import PassClocks

REFERENCE_TOKENS = 2  # one sequence's verify block (an anchor and a draft)
REFERENCE_CONTEXT = 128  # tokens it attends to


class PausableTime:
    """`perf_counter` less the time spent paused: the time source of a run's `WallClock`."""

    def __init__(self) -> None:
        self.paused = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.paused


@dataclass(frozen=True)
class Samples:
    """The reference passes of one run (or of the calibration): seconds on both clocks, in
    the order they were timed."""

    wall: tuple[float, ...]
    cpu: tuple[float, ...]

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

    def record(self) -> dict[str, Any]:
        """What a run's diagnostics keep of it."""
        return {
            "passes": len(self.wall),
            "median_wall_ms": 1e3 * self.median_wall,
            "median_cpu_ms": 1e3 * self.median_cpu,
            "drift": self.drift("wall"),
            "cpu_drift": self.drift("cpu"),
        }


@dataclass
class Reference:
    """The reference pass of one study: timed on `clocks` every `every`-th verify of a real
    run, collected until `take`."""

    target: Any
    clocks: PassClocks
    every: int
    time: PausableTime = field(default_factory=PausableTime)
    _wall: list[float] = field(default_factory=list)
    _cpu: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        from dsim.models.cpu_profile import PassClock

        slot = PassClock(self.target, 1, REFERENCE_CONTEXT + REFERENCE_TOKENS)
        self._setup, self._run = slot.step([(1, REFERENCE_TOKENS, REFERENCE_CONTEXT, False)])

    def clock(self) -> WallClock:
        """A real run's clock: wall time with the reference passes left out."""
        return WallClock(self.time.now)

    def measure(self) -> None:
        """Time one reference pass, with the run's clock paused around it."""
        started = time.perf_counter()
        self._setup()
        wall, cpu = self.clocks.wall(), self.clocks.cpu()
        self._run()
        self._cpu.append(self.clocks.cpu() - cpu)
        self._wall.append(self.clocks.wall() - wall)
        self.time.paused += time.perf_counter() - started

    def take(self) -> Samples:
        """The passes timed since the last `take`, and a fresh start."""
        samples = Samples(tuple(self._wall), tuple(self._cpu))
        self._wall.clear()
        self._cpu.clear()
        return samples


def run_factor(pass_factor: float, run: Samples, calibration: Samples) -> float:
    """k_run (module doc): the calibration's factor moved as the reference pass moved."""
    return pass_factor * run.median_wall / calibration.median_wall
