"""The arrival source: a simpy process that pushes each request to a router at its arrival
time (the pattern of simpy's own examples), instead of each replica reading the trace."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from dsim.engine.clock import delay_to


def arrivals(env: simpy.Environment, arrival_s: np.ndarray, route: Callable[[int], None]):
    """Call `route(i)` at request i's arrival time; simultaneous arrivals in one event, in
    request order, so a replica stepping at that instant sees all of them."""
    times = arrival_s.tolist()
    i, n = 0, len(times)
    while i < n:
        at = times[i]
        yield env.timeout(delay_to(env.now, at))
        while i < n and times[i] == at:
            route(i)
            i += 1
