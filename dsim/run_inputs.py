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
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from dsim import bundles, shipped, spec_grammar
from dsim.acceptance.sources import AcceptanceSource, parse_acceptance
from dsim.checks import check_number
from dsim.cluster.disagg import kv_bytes_per_token
from dsim.cluster.topology import Topology, topology
from dsim.codehash import user_sources
from dsim.engine.config import (
    DraftCost,
    EngineConfig,
    EngineShape,
    SchedCost,
    check_ragged_penalty,
    drafter_kind,
    parse_draft_cost,
    parse_sched_cost,
)
from dsim.errors import InputError
from dsim.fileio import sidecar_of
from dsim.hardware.engines import Scheduling
from dsim.hardware.latency import LatencyModel, decode_graphs, profile_metadata, spec_costs
from dsim.inputs import recording
from dsim.policies import (
    Fixed,
    Policy,
    check_gamma,
    plugin_ref,
    policy_maker,
    reads_sla,
    sla_users,
)
from dsim.run_spec import RunSpec, default
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
    warnings: tuple[str, ...] = ()  # settings that change nothing: said before the run, and
    # repeated in its summary


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
    """A profile and its sidecar, from the package's copy when dsim ships `path`."""
    path = shipped.locate(path)
    meta = profile_metadata(path)
    return Profile(path, LatencyModel.from_csv(path, meta), meta)


DRAFT_FIX = (
    "price the drafter beside this profile (dsim profile --roofline ... --draft-model ...) "
    "or use --draft-cost ratio:X"
)


def resolve_engine(spec: RunSpec) -> EngineInputs:
    """Read the spec's topology, policy, engine limits, profile and drafter cost."""
    profile: Callable[[], Profile] = cache(lambda: load_profile(spec.profile))
    with reading("topology"):
        if spec.kv_bytes_per_token is not None:  # checked even where no KV moves (a typo still)
            kv_bytes_per_token(spec.profile, {}, spec.kv_bytes_per_token)
        shape = topology(
            spec.replicas,
            spec.disagg,
            spec.router,
            spec.kv_link_gbps,
            lambda: _kv_bytes(spec, profile),
        )
    with reading("policy"):
        policy = PolicyFactory.read(spec.policy, spec.sla_tps)
        check_gamma(spec.policy, policy.first, spec.gamma)
    with reading("draft_cost"):
        drafter = spec_grammar.draft_cost(spec.draft_cost)  # read once, here
        bundles.check_pair(spec.profile, drafter.profile, DRAFT_FIX)
        named = bundles.kind_of(drafter.profile)
    with reading("drafter_kind"):
        asked_kind = spec.drafter_kind
        if asked_kind == "auto" and spec.policy != "mtp1":
            asked_kind = named  # a drafter estimate says how it drafts (EAGLE, MTP: ar)
        kind = drafter_kind(spec.policy, asked_kind)
    asked, spec = spec, proposed_drafts(spec, policy.first, kind)
    with reading("sched_cost"):
        sched = parse_sched_cost(spec.sched_cost)
    with reading("profile"):
        target = profile()
        spec_round, prior = spec_costs(spec.profile, target.sidecar)
        where = f"{Path(spec.profile).with_suffix('.json')}: engine ragged penalty"
        prior = check_ragged_penalty(prior, where)
    config = engine_config(spec, target, sched, prior)
    with reading("draft_cost"):
        draft = parse_draft_cost(spec.draft_cost, kind, spec_round, drafter)
    warnings = spec_warnings(asked, draft.ratio, spec.gamma, policy.first.synchronous)
    return EngineInputs(spec, config, target, draft, shape, policy, warnings)


def proposed_drafts(spec: RunSpec, policy: Policy, kind: str) -> RunSpec:
    """The spec as the engine runs it: a fixed length K with an autoregressive drafter proposes
    K drafts a round, not --gamma (an engine serving `fixed:K` is set to K speculative tokens,
    and each draft is a drafter pass: run at gamma G > K, it paid G passes for K verified
    drafts). A block drafter's one pass and an MTP-1 head's do not depend on it."""
    if kind == "ar" and isinstance(policy, Fixed) and 0 < policy.k < spec.gamma:
        return replace(spec, gamma=policy.k)
    return spec


def spec_warnings(
    spec: RunSpec, draft_ratio: float, proposed: int | None = None, synchronous: bool = True
) -> tuple[str, ...]:
    """The spec's settings that the run ignores, or that are legal but unlike any real
    deployment, each as one line (docs/design.md, Input limits); `draft_ratio` is its
    `--draft-cost ratio:X` as read (0 for a drafter profile), `proposed` the drafts a round
    the engine runs (`proposed_drafts`), `synchronous` whether its policy pays --sched-cost."""
    lines = []
    if not synchronous and spec.sched_cost != default("sched_cost"):
        lines.append(f"--sched-cost {spec.sched_cost} has no effect on policy {spec.policy}: "
                     "it does not schedule on the round's critical path")  # fmt: skip
    if proposed is not None and proposed != spec.gamma:
        lines.append(f"--gamma {spec.gamma} has no effect on {spec.policy} with an "
                     f"autoregressive drafter: it drafts {proposed} a round, as an engine set "
                     f"to {proposed} speculative tokens does")  # fmt: skip
    if spec.sla_tps is not None and not reads_sla(spec.policy):
        lines.append(f"--sla-tps {spec.sla_tps:g} has no effect on policy {spec.policy} "
                     f"(only {sla_users()} read it)")  # fmt: skip
    if spec.disagg is None and (
        spec.kv_link_gbps != default("kv_link_gbps") or spec.kv_bytes_per_token is not None
    ):
        lines.append("--kv-link-gbps and --kv-bytes-per-token have no effect without --disagg "
                     "P:D (no KV moves between replicas)")  # fmt: skip
    if draft_ratio > 1:
        lines.append(f"--draft-cost {spec.draft_cost}: a drafter pass costs {draft_ratio:g}x the "
                     f"target's step (drafters cost a fraction of it; above "
                     f"{spec_grammar.MAX_DRAFT_RATIO:g}x is refused)")  # fmt: skip
    if spec.drafter_kind == "mtp1" and spec.policy not in ("ar", "mtp1") and spec.gamma > 1:
        lines.append(f"--drafter-kind mtp1 prices one pass of one token a round, but "
                     f"{spec.policy} drafts up to --gamma {spec.gamma}: use --drafter-kind "
                     f"block or ar (or --gamma 1)")  # fmt: skip
    return tuple(lines)


FALLBACK = EngineConfig()  # the limits of a profile whose sidecar names no engine


def engine_config(
    spec: RunSpec, target: Profile, sched: SchedCost, ragged_prior: float
) -> EngineConfig:
    """The engine's limits: the spec's where it sets them, else the profile's engine rule
    (its step token budget, prefill chunk and mixing; the KV capacity its memory leaves and
    how it admits requests to it; its ragged verify penalty), else the fallbacks a profile
    without an engine has always run with."""
    rule = scheduling(target)
    kv = target.sidecar.get("memory", {}).get("kv_capacity_tokens")
    if kv is not None:
        name = "memory.kv_capacity_tokens"
        where = sidecar_of(target.path)
        kv = int(check_number(kv, name, ge=1, le=2**40, integer=True, where=where))
    budget = spec.max_num_batched_tokens
    if budget is None and rule is not None:
        budget = rule.token_budget
    chunk = spec.prefill_chunk
    if chunk is None:
        chunk = (rule and rule.prefill_chunk) or budget or FALLBACK.prefill_chunk
    mixed = spec.prefill_mixing == "mixed" or (
        spec.prefill_mixing == "engine" and (rule is None or rule.mixed_prefill)
    )
    reserve = spec.admission == "reserve" or (
        spec.admission == "engine" and rule is not None and rule.admission == "reserve"
    )
    return EngineConfig(
        gamma=spec.gamma,
        max_seqs=spec.max_seqs,
        kv_tokens=spec.kv_tokens or kv or FALLBACK.kv_tokens,
        prefill_chunk=chunk,
        token_budget=budget,
        mixed_prefill=mixed,
        reserve_output=reserve,
        fused_prefill=spec.fused_prefill,
        sched=sched,
        ragged_penalty=ragged_prior if spec.ragged_penalty is None else spec.ragged_penalty,
        shape=engine_shape(target, spec.gamma),
    )


def engine_shape(target: Profile, gamma: int) -> EngineShape:
    """The captured verify token counts and the vocabulary the profile's sidecar records (a
    graph keyed by requests captures R x (1 + gamma) tokens of a uniform verify step)."""
    side = target.sidecar
    sizes, keyed = decode_graphs(side, target.path)
    if keyed == "requests":
        sizes = tuple(s * (1 + gamma) for s in sizes)
    vocab = side.get("architecture", {}).get("vocab") or side.get("model_config", {}).get(
        "vocab_size", 0
    )
    where = sidecar_of(target.path)  # the value is the sidecar's
    vocab = int(check_number(vocab, "vocab", ge=0, le=2**31, integer=True, where=where))
    return EngineShape(sizes, vocab)


def scheduling(target: Profile) -> Scheduling | None:
    """The scheduling rule the profile's sidecar records for its engine (None: no engine)."""
    record = target.sidecar.get("engine", {}).get("scheduling")
    if record is None:
        return None
    with reading("profile"):
        return Scheduling.from_record(record, str(sidecar_of(target.path)))


def _kv_bytes(spec: RunSpec, profile: Callable[[], Profile]) -> float:
    """The KV bytes per token a disaggregated run moves: given, or from the profile's sidecar."""
    if spec.kv_bytes_per_token is not None:
        return kv_bytes_per_token(spec.profile, {}, spec.kv_bytes_per_token)
    with reading("profile"):
        sidecar = profile().sidecar
    return kv_bytes_per_token(spec.profile, sidecar, None)


def load_spec_workload(spec: RunSpec, trace: Workload | None = None) -> Workload:
    """The spec's trace at its rate scale, cut to its window on that scaled timeline (so a
    higher load reads more of the trace for the same simulated seconds), then to its first
    requests. A window past the trace's end is an error unless `window_wrap` replays the
    trace end to end. `trace`: the spec's trace already read (a sweep's size gate reads each
    trace once)."""
    with reading("trace"):
        if trace is None:
            trace = load_workload(spec.trace, spec.seed)
        workload = trace.scale_rate(spec.rate_scale)
        if spec.window:
            start, end = spec_grammar.window(spec.window)
            workload = _fit_window(workload, spec, end).window(start, end)
        if spec.max_requests is not None:
            workload = workload.head(spec.max_requests)
        return workload


def _fit_window(workload: Workload, spec: RunSpec, end: float | None) -> Workload:
    """The scaled trace, replayed until `end` with `window_wrap`; an error if `end` is past it."""
    if end is None or end <= workload.end_s:
        return workload
    if spec.window_wrap:
        return workload.wrapped(end)
    scale = f" at rate scale {spec.rate_scale:g}" if spec.rate_scale != 1 else ""
    raise InputError(
        workload.source,
        None,
        f"--window {spec.window!r} ends past the trace's end: the trace spans "
        f"{workload.end_s:.6g} s{scale} (windows are on the scaled timeline); use an END up to "
        "that, or --window-wrap to replay the trace end to end",
    )


def resolve(spec: RunSpec) -> RunInputs:
    """Every input of a simulated run, each spec field read once."""
    engine = resolve_engine(spec)
    workload = load_spec_workload(spec)
    with reading("acceptance"):
        acceptance = parse_acceptance(spec.acceptance, engine.spec.gamma, spec.calibration)
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
    ref = plugin_ref(spec.policy)
    return tuple(sorted({*data, *(user_sources(ref.target) if ref else ())}))


@lru_cache(maxsize=256)
def _input_files(
    trace: str, acceptance: str, gamma: int, calibration: str | None, profile: str, draft_cost: str
) -> tuple[str, ...]:
    with recording() as reads:
        load_workload(trace)
        parse_acceptance(acceptance, gamma, calibration)
        LatencyModel.from_csv(shipped.locate(profile))
        parse_draft_cost(draft_cost)
    sidecars = {str(Path(f).with_suffix(".json")) for f in reads}
    return tuple(sorted(reads | {f for f in sidecars if Path(f).is_file()}))
