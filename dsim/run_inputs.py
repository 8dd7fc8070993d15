"""A RunSpec's strings read once, into the typed inputs the engine, cluster, sweeps and real
mode take: the workload, the acceptance source, the profile with its sidecar, the engine's
limits and costs, the topology and a policy factory.

`resolve_engine` reads what every run needs (simulated or real); `resolve` adds the simulated
run's workload and acceptance. Each spec field is read here and nowhere else, once per run or
sweep point; an InputError raised while reading one carries `field`, the spec field it came
from (a sweep config names its key with it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from dsim import spec_grammar
from dsim.acceptance.sources import AcceptanceSource, parse_acceptance
from dsim.cluster.disagg import kv_bytes_per_token
from dsim.cluster.topology import Topology, topology
from dsim.codehash import user_sources
from dsim.engine.config import (
    DraftCost,
    EngineConfig,
    drafter_kind,
    parse_draft_cost,
    parse_sched_cost,
)
from dsim.errors import InputError
from dsim.hardware.latency import LatencyModel, profile_metadata
from dsim.inputs import recording
from dsim.policies import Policy, plugin_source, policy_maker
from dsim.run_spec import RunSpec
from dsim.workload import Workload, load_workload


@dataclass(frozen=True)
class Profile:
    """The target's step-time profile and what its sidecar says about how it was made."""

    path: str
    latency: LatencyModel
    sidecar: dict[str, Any]


@dataclass(frozen=True)
class PolicyFactory:
    """Fresh policy objects for one run's replicas (policies may keep per-run state), from a
    spec read once (`policy_maker`); the first is built, and a bad spec refused, up front."""

    spec: str
    make: Callable[[], Policy]
    first: Policy  # handed to the first replica

    @classmethod
    def read(cls, spec: str, sla_tps: float | None) -> PolicyFactory:
        make = policy_maker(spec, sla_tps)
        return cls(spec, make, make())

    @property
    def drafts(self) -> bool:
        return bool(self.first.drafts)

    def instances(self) -> Iterator[Policy]:
        yield self.first
        while True:
            yield self.make()


@dataclass(frozen=True)
class EngineInputs:
    """What the engine and cluster take, for simulated and real runs alike."""

    spec: RunSpec
    config: EngineConfig
    profile: Profile
    draft_cost: DraftCost
    topology: Topology
    policy: PolicyFactory


@dataclass(frozen=True)
class RunInputs:
    """A simulated run's inputs: the engine's, the workload and the acceptance source."""

    engine: EngineInputs
    workload: Workload
    acceptance: AcceptanceSource


@contextmanager
def reading(field: str) -> Iterator[None]:
    """Tag an InputError raised while reading spec field `field` with that field."""
    try:
        yield
    except InputError as exc:
        if getattr(exc, "field", None) is None:
            exc.field = field
        raise


def load_profile(path: str) -> Profile:
    return Profile(path, LatencyModel.from_csv(path), profile_metadata(path))


def resolve_engine(spec: RunSpec) -> EngineInputs:
    """Read the spec's topology, policy, engine limits, profile and drafter cost."""
    profile: Callable[[], Profile] = cache(lambda: load_profile(spec.profile))
    with reading("topology"):
        shape = topology(
            spec.replicas,
            spec.disagg,
            spec.router,
            spec.kv_link_gbps,
            lambda: _kv_bytes(spec, profile),
        )
    with reading("policy"):
        policy = PolicyFactory.read(spec.policy, spec.sla_tps)
    with reading("sched_cost"):
        sched = parse_sched_cost(spec.sched_cost)
    config = EngineConfig(
        gamma=spec.gamma,
        max_seqs=spec.max_seqs,
        kv_tokens=spec.kv_tokens,
        prefill_chunk=spec.prefill_chunk,
        token_budget=spec.max_num_batched_tokens,
        fused_prefill=spec.fused_prefill,
        sched=sched,
    )
    with reading("profile"):
        target = profile()
    with reading("drafter_kind"):
        kind = drafter_kind(spec.policy, spec.drafter_kind)
    with reading("draft_cost"):
        draft = parse_draft_cost(spec.draft_cost, kind)
    return EngineInputs(spec, config, target, draft, shape, policy)


def _kv_bytes(spec: RunSpec, profile: Callable[[], Profile]) -> float:
    """The KV bytes per token a disaggregated run moves: given, or from the profile's sidecar."""
    if spec.kv_bytes_per_token is not None:
        return kv_bytes_per_token(spec.profile, {}, spec.kv_bytes_per_token)
    with reading("profile"):
        sidecar = profile().sidecar
    return kv_bytes_per_token(spec.profile, sidecar, None)


def load_spec_workload(spec: RunSpec) -> Workload:
    """The spec's trace, cut to its window and first requests, at its rate scale."""
    with reading("trace"):
        workload = load_workload(spec.trace, spec.seed)
        if spec.window:
            workload = workload.window(*spec_grammar.window(spec.window))
        if spec.max_requests is not None:
            workload = workload.head(spec.max_requests)
        return workload.scale_rate(spec.rate_scale)


def resolve(spec: RunSpec) -> RunInputs:
    """Every input of a simulated run, each spec field read once."""
    engine = resolve_engine(spec)
    workload = load_spec_workload(spec)
    with reading("acceptance"):
        acceptance = parse_acceptance(spec.acceptance, spec.gamma, spec.calibration)
    return RunInputs(engine, workload, acceptance)


def input_files(spec: RunSpec) -> tuple[str, ...]:
    """Every file a simulation of `spec` reads, plus the NAME.json sidecar beside each one,
    plus a plug-in policy's source files (`user_sources`: its file or module and the user's
    own modules it imports; read afresh, so an edited import is seen).

    Found by building the spec's inputs while `dsim.inputs.recording()` watches, so files named
    inside specs (`synthetic:...,lengths=FILE`, `mix:` parts, calibrations, trace sidecars)
    and any future source that reads through `input_file` are listed by construction.
    """
    data = _input_files(
        spec.trace, spec.acceptance, spec.gamma, spec.calibration, spec.profile, spec.draft_cost
    )
    target = plugin_source(spec.policy)
    return tuple(sorted({*data, *(user_sources(target) if target else ())}))


@lru_cache(maxsize=256)
def _input_files(
    trace: str, acceptance: str, gamma: int, calibration: str | None, profile: str, draft_cost: str
) -> tuple[str, ...]:
    with recording() as reads:
        load_workload(trace)
        parse_acceptance(acceptance, gamma, calibration)
        LatencyModel.from_csv(profile)
        parse_draft_cost(draft_cost)
    sidecars = {str(Path(f).with_suffix(".json")) for f in reads}
    return tuple(sorted(reads | {f for f in sidecars if Path(f).is_file()}))
