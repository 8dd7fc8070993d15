"""Routers: which replica a request goes to, from the replicas' state at that instant.

Ties go to the lowest replica index, so routing is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dsim.engine.replica import Replica
from dsim.errors import InputError


class Router(Protocol):
    def pick(self, replicas: Sequence[Replica]) -> int: ...


class RoundRobin:
    """Replicas in turn, whatever their state."""

    def __init__(self) -> None:
        self.sent = 0

    def pick(self, replicas: Sequence[Replica]) -> int:
        k = self.sent % len(replicas)
        self.sent += 1
        return k


class LeastLoaded:
    """Fewest queued plus running tokens (`Replica.work`: prefill still to run plus output
    still to emit)."""

    def pick(self, replicas: Sequence[Replica]) -> int:
        work = [r.work for r in replicas]
        return work.index(min(work))  # the first of the least loaded


class KvAware:
    """Most free KV pages (blocks); queued requests hold none yet."""

    def pick(self, replicas: Sequence[Replica]) -> int:
        free = [r.free_blocks for r in replicas]
        return free.index(max(free))  # the first of those with the most


ROUTERS = {"round-robin": RoundRobin, "least-loaded": LeastLoaded, "kv-aware": KvAware}


def router_kind(name: str) -> type[Router]:
    """The router class `--router NAME` names (each run builds its own: routers keep state)."""
    if name not in ROUTERS:
        raise InputError(None, None, f"--router {name!r}: expected one of {', '.join(ROUTERS)}")
    return ROUTERS[name]
