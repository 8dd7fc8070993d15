"""How long a step takes (the clock strategy) and exact event times in simpy.

A simulated run charges each step the hardware profile's latency for its batch; a real-model
run may instead charge the measured wall time of the step's real work (`dsim serve --clock
wall`). The engine asks its clock and never needs to know which one it has.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def start(self, now: float) -> float:
        """A mark taken before the step's work, which starts at engine time `now`."""

    def seconds(self, started: float, modelled: float) -> float:
        """The step's duration, given the mark and the profile's latency for it."""


class ProfileClock:
    """Steps last the profile's latency (deterministic)."""

    def start(self, now: float) -> float:
        return 0.0

    def seconds(self, started: float, modelled: float) -> float:
        return modelled


class WallClock:
    """Steps last the measured wall time of their real work, read from `now`: a time source
    that leaves out work that is not the run's (`dsim validate` pauses it around its
    reference passes)."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self.now = now

    def start(self, now: float) -> float:
        return self.now()

    def seconds(self, started: float, modelled: float) -> float:
        return self.now() - started


ClockMaker = Callable[[], Clock]  # one clock per replica
CLOCKS: dict[str, ClockMaker] = {"profile": ProfileClock, "wall": WallClock}


def clock_maker(clock: str | ClockMaker) -> ClockMaker:
    """A clock by its name (`CLOCKS`), or a caller's own maker as it is."""
    return CLOCKS[clock] if isinstance(clock, str) else clock


def delay_to(now: float, at: float) -> float:
    """The simpy delay that lands exactly on time `at` (now + delay == at in floating point),
    so an event scheduled for an arrival or a step's end happens at that very time."""
    delay = max(0.0, at - now)
    while now + delay < at:
        delay = math.nextafter(delay, math.inf)
    while delay > 0 and now + delay > at:
        delay = math.nextafter(delay, -math.inf)
    return delay
