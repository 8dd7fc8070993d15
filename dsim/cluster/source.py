"""The arrival source: a simpy process that pushes each request to a router at its arrival
time (the pattern of simpy's own examples), instead of each replica reading the trace."""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np
import simpy

from dsim.engine.clock import delay_to
from dsim.engine.records import Records


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


def closed_loop(
    env: simpy.Environment,
    earliest_s: np.ndarray,
    route: Callable[[int], None],
    limit: int,
    records: Records,
):
    """A closed-loop client (`vllm bench serve --max-concurrency N`, NIM's benchmark client):
    at most `limit` requests in flight; request i is sent at the first time it is due
    (`earliest_s`: the trace's renewal times, 0 without a rate) and a slot is free, a slot freeing
    when a request finishes. Replicas run ahead of simpy's clock between events, so a finish
    reports its own time and the send waits until then. Send times go to `records.sent` (TTFT
    counts from the send)."""
    sent = np.array(earliest_s, np.float64)
    records.sent = sent
    # a heap: when each slot is (or becomes) free; slots beyond the requests are never used
    free_at = [0.0] * min(limit, len(sent))
    wake = [env.event()]

    def finished(count: int, at: float) -> None:
        for _ in range(count):
            heapq.heappush(free_at, at)
        if not wake[0].triggered:
            wake[0].succeed()

    records.on_finish = finished
    for i in range(len(sent)):
        while not free_at:
            yield wake[0]
            wake[0] = env.event()
        at = max(heapq.heappop(free_at), float(sent[i]))
        if at > env.now:
            yield env.timeout(delay_to(env.now, at))
        sent[i] = env.now
        route(i)
