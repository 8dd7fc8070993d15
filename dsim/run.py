"""One simulation from its full description: the function behind `dsim run` and each sweep point."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import simpy

from dsim.acceptance.sources import parse_acceptance
from dsim.checks import check_number, parse_number
from dsim.cluster.summary import replica_figures
from dsim.cluster.topology import Cluster, check_topology, joined, replica_rng
from dsim.engine.backend import Backend, Simulated
from dsim.engine.clock import CLOCKS
from dsim.engine.config import EngineConfig, drafter_kind, parse_draft_cost, parse_sched_cost
from dsim.engine.records import Records
from dsim.engine.replica import Replica
from dsim.engine.steplog import StepLog
from dsim.errors import SimulationStuck
from dsim.fileio import SCHEMA_VERSION, atomic_dir, write_json, write_parquet
from dsim.hardware.latency import LatencyModel, gpu_figures
from dsim.inputs import recording
from dsim.metrics import summarize
from dsim.policies import parse_policy
from dsim.workload import Workload, load_workload

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
DEFAULT_PROFILE = "profiles/h200-qwen3-8b-roofline.csv"
DEFAULT_ACCEPTANCE = "preset:dspark:chat"
RUN_OWNER = "summary.json"  # the file that marks a folder as a dsim run's output


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a simulation's output (hashable, so sweeps can cache it)."""

    trace: str = DEFAULT_TRACE
    profile: str = DEFAULT_PROFILE
    acceptance: str = DEFAULT_ACCEPTANCE
    policy: str = "dspark"
    gamma: int = 7
    seed: int = 0
    window: str | None = None
    rate_scale: float = 1.0
    max_requests: int | None = None
    max_seqs: int = 256
    kv_tokens: int = 500_000
    prefill_chunk: int = 2048
    draft_cost: str = "ratio:0.1"
    sla_tps: float | None = None
    calibration: str | None = None
    sched_cost: str = "auto"  # per-round cost of synchronous schedulers (docs/policies.md)
    drafter_kind: str = "auto"  # auto | block | ar | mtp1 (engine.config.drafter_kind)
    replicas: int = 1
    router: str = "round-robin"
    disagg: str | None = None  # "P:D": prefill and decode replicas (replaces replicas)
    kv_link_gbps: float = 400.0
    kv_bytes_per_token: float | None = None  # None: from the profile's sidecar
    fused_prefill: bool = True  # False: an engine that runs prefill as its own pass (real mode)

    def __post_init__(self) -> None:
        """Every number finite and in range (a NaN rate or SLA would stall simulated time);
        the topology's own settings are checked by `check_topology`."""
        for name in ("gamma", "max_seqs", "kv_tokens", "prefill_chunk"):
            check_number(getattr(self, name), name, ge=1, integer=True)
        check_number(self.seed, "seed", ge=0, integer=True)
        check_number(self.rate_scale, "rate_scale", gt=0)
        if self.max_requests is not None:
            check_number(self.max_requests, "max_requests", ge=1, integer=True)
        if self.sla_tps is not None:
            check_number(self.sla_tps, "sla_tps", gt=0)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class RunResult:
    requests: pd.DataFrame
    summary: dict
    steps: StepLog  # every replica's steps, replica by replica
    requested: np.ndarray  # output tokens the workload asked for (a cap in real mode)
    replica_steps: list[StepLog] = field(default_factory=list)  # each replica's own steps
    replica_work: list[int] = field(default_factory=list)  # tokens each still owed at the end


def _window(text: str) -> tuple[float, float | None]:
    start, _, end = text.partition(":")
    lo = parse_number(start or "0", f"--window {text!r}: START", ge=0)
    return lo, (parse_number(end, f"--window {text!r}: END", gt=lo) if end else None)


def load_spec_workload(spec: RunSpec) -> Workload:
    """The spec's trace, cut to its window and first requests, at its rate scale."""
    workload = load_workload(spec.trace, spec.seed)
    if spec.window:
        workload = workload.window(*_window(spec.window))
    if spec.max_requests is not None:
        workload = workload.head(spec.max_requests)
    return workload.scale_rate(spec.rate_scale)


def input_files(spec: RunSpec) -> tuple[str, ...]:
    """Every file a simulation of `spec` reads, plus the NAME.json sidecar beside each one.

    Found by building the spec's inputs while `dsim.inputs.recording()` watches, so files named
    inside specs (`synthetic:...,lengths=FILE`, `mix:` parts, calibrations, trace sidecars)
    and any future source that reads through `input_file` are listed by construction.
    """
    return _input_files(
        spec.trace, spec.acceptance, spec.gamma, spec.calibration, spec.profile, spec.draft_cost
    )


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


def simulate(spec: RunSpec, progress: Callable[[int, int], None] | None = None) -> RunResult:
    """Build inputs from `spec`, run its replicas with simulated acceptance."""
    check_topology(spec)
    workload = load_spec_workload(spec)
    acceptance = parse_acceptance(spec.acceptance, spec.gamma, spec.calibration)
    return run_engine(spec, workload, Simulated(acceptance), progress=progress)


def run_engine(
    spec: RunSpec,
    workload: Workload,
    backend: Backend,
    clock: str = "profile",
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Run the spec's replicas over `workload` with `backend` executing the rounds (simulated
    or real). Each replica has its own engine, policy state and random stream
    (`dsim.cluster.topology`); the backend and the per-request records are shared.

    The spec gives the policy, engine limits, topology, profile and drafter cost; its trace
    and acceptance fields are ignored here (the caller built `workload` and `backend` from them).
    """
    check_topology(spec)
    policy = parse_policy(spec.policy, spec.sla_tps)  # bad policies fail before anything runs
    cfg = EngineConfig(
        spec.gamma,
        spec.max_seqs,
        spec.kv_tokens,
        prefill_chunk=spec.prefill_chunk,
        fused_prefill=spec.fused_prefill,
        sched=parse_sched_cost(spec.sched_cost),
    )
    latency = LatencyModel.from_csv(spec.profile)
    draft_cost = parse_draft_cost(spec.draft_cost, drafter_kind(spec.policy, spec.drafter_kind))
    n = len(workload)
    records = Records.empty(n)
    rng = np.random.default_rng(spec.seed)
    backend.bind(n, rng)

    def make_replica(k: int, handoff) -> Replica:
        return Replica(
            workload,
            latency,
            draft_cost,
            backend,
            parse_policy(spec.policy, spec.sla_tps),
            cfg,
            replica_rng(spec.seed, k, rng),
            records,
            CLOCKS[clock](),
            k,
            handoff,
        )

    env = simpy.Environment()
    cluster = Cluster(env, spec, make_replica, workload.arrival_s, workload.prompt_tokens)
    cluster.start(
        None if progress is None else (lambda done: progress(done, n)),
        workload.concurrency,
        records,
    )
    env.run()
    requests = records.table(workload)
    logs = cluster.step_logs()
    steps = joined(logs)
    summary = summarize(requests, steps, spec.policy, len(logs))
    summary["kv_peak_blocks"] = int(steps.kv_blocks_used.max()) if len(steps.kv_blocks_used) else 0
    summary["kv_capacity_blocks"] = cfg.kv_blocks
    summary["step_model"] = latency.describe()
    summary.update(gpu_figures(spec.profile, len(logs), summary["throughput_tok_s"]))
    summary["drafter_kind"] = draft_cost.kind if policy.drafts else "none"
    summary.update(replica_figures(requests, logs, cluster.shape.roles, summary["duration_s"]))
    if records.finished != n:  # every request ends unless the engine stalled
        raise SimulationStuck(f"{n - records.finished} of {n} requests never finished")
    work = [r.work for r in cluster.replicas]
    return RunResult(requests, summary, steps, workload.output_tokens, logs, work)


def write_run(
    result: RunResult,
    spec: RunSpec,
    out: str | Path,
    extra: Callable[[Path], None] | None = None,
) -> None:
    """requests.parquet + summary.json (+ the spec, + what `extra(folder)` adds), replacing an
    earlier run's folder as a whole or not at all."""
    with atomic_dir(out, RUN_OWNER) as tmp:
        write_parquet(result.requests, tmp / "requests.parquet")
        summary = {**result.summary, "schema_version": SCHEMA_VERSION, "spec": spec.as_dict()}
        write_json(tmp / "summary.json", summary)
        if extra is not None:
            extra(tmp)
