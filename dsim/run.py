"""One simulation from its full description: the function behind `dsim run` and each sweep point."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import simpy

from dsim.acceptance.sources import parse_acceptance
from dsim.cluster.summary import replica_figures
from dsim.cluster.topology import Cluster, check_topology, joined, replica_rng
from dsim.engine.backend import Backend, Simulated
from dsim.engine.clock import CLOCKS
from dsim.engine.config import EngineConfig, parse_draft_cost
from dsim.engine.records import Records
from dsim.engine.replica import Replica
from dsim.engine.steplog import StepLog
from dsim.errors import InputError
from dsim.fileio import SCHEMA_VERSION, atomic_dir, write_json, write_parquet
from dsim.hardware.latency import LatencyModel
from dsim.metrics import summarize
from dsim.policies import parse_policy
from dsim.workload import Workload, load_workload

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
DEFAULT_PROFILE = "profiles/h200-qwen3-8b-roofline.csv"
DEFAULT_ACCEPTANCE = "preset:dspark:chat"


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
    replicas: int = 1
    router: str = "round-robin"
    disagg: str | None = None  # "P:D": prefill and decode replicas (replaces replicas)
    kv_link_gbps: float = 400.0
    kv_bytes_per_token: float | None = None  # None: from the profile's sidecar

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
    start, sep, end = text.partition(":")
    try:
        return float(start or 0), (float(end) if end else None)
    except ValueError:
        raise InputError(None, None, f"--window {text!r}: expected START:END in seconds") from None


def load_spec_workload(spec: RunSpec) -> Workload:
    """The spec's trace, cut to its window and first requests, at its rate scale."""
    workload = load_workload(spec.trace, spec.seed)
    if spec.window:
        workload = workload.window(*_window(spec.window))
    if spec.max_requests:
        workload = workload.head(spec.max_requests)
    return workload.scale_rate(spec.rate_scale)


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
    parse_policy(spec.policy, spec.sla_tps)  # bad policies fail before anything runs
    cfg = EngineConfig(spec.gamma, spec.max_seqs, spec.kv_tokens, prefill_chunk=spec.prefill_chunk)
    latency = LatencyModel.from_csv(spec.profile)
    draft_cost = parse_draft_cost(spec.draft_cost)
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
    cluster.start(None if progress is None else (lambda done: progress(done, n)))
    env.run()
    requests = records.table(workload)
    logs = cluster.step_logs()
    steps = joined(logs)
    summary = summarize(requests, steps, spec.policy, len(logs))
    summary["kv_peak_blocks"] = int(steps.kv_blocks_used.max()) if len(steps.kv_blocks_used) else 0
    summary["kv_capacity_blocks"] = cfg.kv_blocks
    summary.update(replica_figures(requests, logs, cluster.shape.roles, summary["duration_s"]))
    if records.finished != n:  # every request ends; anything else is an engine bug
        raise RuntimeError(f"{n - records.finished} of {n} requests never finished")
    work = [r.work for r in cluster.replicas]
    return RunResult(requests, summary, steps, workload.output_tokens, logs, work)


def write_run(result: RunResult, spec: RunSpec, out: str | Path) -> None:
    """requests.parquet + summary.json (+ the spec), written as a whole or not at all."""
    with atomic_dir(out) as tmp:
        write_run_files(result, spec, tmp)


def write_run_files(result: RunResult, spec: RunSpec, directory: Path) -> None:
    """The files of `write_run` into a directory the caller moves into place."""
    write_parquet(result.requests, directory / "requests.parquet")
    summary = {**result.summary, "schema_version": SCHEMA_VERSION, "spec": spec.as_dict()}
    write_json(directory / "summary.json", summary)
