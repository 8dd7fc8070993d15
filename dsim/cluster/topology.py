"""A run's replicas: how many, what each does, where requests go, and their random streams.

Colocated (`--replicas N`): every replica prefills and decodes; the router picks one per
arrival. Disaggregated (`--disagg P:D`): replicas 0..P-1 prefill only (chosen least-loaded),
P..P+D-1 decode (chosen by the router when a prefill ends; see `dsim.cluster.disagg`).

Random streams: replica 0 draws from the run's generator (the stream a single replica always
drew from, after the backend's per-request draws); replica k >= 1 from a stream spawned from the
run seed with key k, which depends on neither the number of replicas nor the others' draws.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from dsim import spec_grammar
from dsim.cluster.disagg import KvLink, check_positive, seconds_per_token
from dsim.cluster.router import LeastLoaded, Router, router_kind
from dsim.cluster.source import arrivals, closed_loop
from dsim.engine.records import Records
from dsim.engine.replica import Replica
from dsim.engine.steplog import FIELDS, StepLog
from dsim.errors import InputError

COLOCATED, PREFILL, DECODE = "colocated", "prefill", "decode"


@dataclass(frozen=True)
class Layout:
    """Replica roles, in replica order."""

    roles: tuple[str, ...]

    @property
    def disaggregated(self) -> bool:
        return PREFILL in self.roles


MAX_REPLICAS = 1024  # replicas of one run, colocated or P + D (docs/cluster.md)


def layout(replicas: int, disagg: str | None) -> Layout:
    """Roles from `--replicas N` or `--disagg P:D` (which replaces --replicas); at most
    MAX_REPLICAS in all."""
    ok = isinstance(replicas, int) and not isinstance(replicas, bool)
    if not ok or not 1 <= replicas <= MAX_REPLICAS:
        raise InputError(
            None,
            None,
            f"--replicas must be a whole number >= 1 and <= {MAX_REPLICAS}, got {replicas!r}",
        )
    if disagg is None:
        return Layout((COLOCATED,) * replicas)
    if replicas != 1:
        raise InputError(None, None, "--disagg P:D replaces --replicas: give one of them")
    p, d = spec_grammar.pair(disagg, "--disagg")
    if p + d > MAX_REPLICAS:
        raise InputError(None, None, f"--disagg {disagg!r}: P + D must be at most {MAX_REPLICAS}")
    return Layout((PREFILL,) * p + (DECODE,) * d)


@dataclass(frozen=True)
class Topology:
    """A run's replicas, resolved: their roles, the router's kind and, when disaggregated, the
    KV link (bandwidth, and bytes per token one GPU of a replica sends)."""

    layout: Layout
    router: type[Router]
    kv_link_gbps: float = 0.0
    kv_bytes_per_token: float = 0.0


def topology(
    replicas: int,
    disagg: str | None,
    router: str,
    kv_link_gbps: float,
    kv_bytes: Callable[[], float],
) -> Topology:
    """Check the cluster options; `kv_bytes()` (the KV size per token) is asked only when the
    layout is disaggregated."""
    shape = layout(replicas, disagg)
    kind = router_kind(router)
    gbps = check_positive("kv-link-gbps", kv_link_gbps)  # unused when colocated, still finite
    if not shape.disaggregated:
        return Topology(shape, kind)
    per_token = kv_bytes()
    seconds_per_token(per_token, gbps)  # a transfer time that is finite and sane, or refused
    return Topology(shape, kind, gbps, per_token)


def replica_rng(seed: int, k: int, run_rng: np.random.Generator) -> np.random.Generator:
    """Replica k's random stream (see the module doc)."""
    if k == 0:
        return run_rng
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(k,)))


class Cluster:
    """The replicas of one run and the processes that feed them."""

    def __init__(
        self,
        env: simpy.Environment,
        shape: Topology,
        make_replica: Callable[[int, Callable[[int, float], None] | None], Replica],
        workload_arrivals: np.ndarray,
        prompt_tokens: np.ndarray,
    ) -> None:
        self.env, self.shape = env, shape.layout
        router = shape.router()
        roles = self.shape.roles
        if self.shape.disaggregated:
            n_prefill = roles.count(PREFILL)
            decode = [make_replica(k, None) for k in range(n_prefill, len(roles))]
            link = KvLink(
                env,
                decode,
                router,
                prompt_tokens,
                shape.kv_bytes_per_token,
                shape.kv_link_gbps,
            )
            prefill = [make_replica(k, link.handoff) for k in range(n_prefill)]
            self.replicas = prefill + decode
            self.entry, self.entry_router = prefill, LeastLoaded()
        else:
            self.replicas = [make_replica(k, None) for k in range(len(roles))]
            self.entry, self.entry_router = self.replicas, router
        self.arrival_s = workload_arrivals

    def _route(self, i: int) -> None:
        self.entry[self.entry_router.pick(self.entry)].arrive(i)

    def start(
        self,
        progress: Callable[[int], None] | None,
        concurrency: int | None = None,
        records: Records | None = None,
    ) -> None:
        """Start the arrival source (a closed-loop client when `concurrency` is set: it frees
        a slot as `records` count a finish) and every replica."""
        if concurrency is None:
            self.env.process(arrivals(self.env, self.arrival_s, self._route))
        else:
            source = closed_loop(self.env, self.arrival_s, self._route, concurrency, records)
            self.env.process(source)
        for replica in self.replicas:
            self.env.process(replica.process(self.env, progress))

    def step_logs(self) -> list[StepLog]:
        return [r.step_log() for r in self.replicas]


def joined(logs: list[StepLog]) -> StepLog:
    """Every replica's steps in one log (replica by replica)."""
    if len(logs) == 1:
        return logs[0]
    return StepLog(*(np.concatenate([getattr(g, f) for g in logs]) for f in FIELDS))
