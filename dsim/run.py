"""One simulation from its full description: the function behind `dsim run` and each sweep point."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import simpy

from dsim.cluster.summary import kv_transfer_figures, replica_figures
from dsim.cluster.topology import Cluster, joined, replica_rng
from dsim.engine.backend import Backend, Simulated
from dsim.engine.clock import ClockMaker, clock_maker
from dsim.engine.config import DraftCost, EngineConfig
from dsim.engine.records import Records
from dsim.engine.replica import Replica
from dsim.engine.steplog import StepLog
from dsim.errors import SimulationStuck
from dsim.fileio import SCHEMA_VERSION, atomic_dir, check_replaced_dir, write_json, write_parquet
from dsim.hardware.latency import gpu_figures
from dsim.metrics import summarize
from dsim.run_inputs import EngineInputs, RunInputs, resolve
from dsim.run_spec import RunSpec
from dsim.workload import Workload

RUN_OWNER = "summary.json"  # the file that marks a folder as a dsim run's output
REAL_FILES = ("texts.jsonl", "steps.csv")  # what a real run adds (dsim.real.runner)
RUN_FILES = ("requests.parquet", RUN_OWNER, *REAL_FILES)  # every file a run folder holds
RUN_FORMAT = "dsim-run"  # summary.json's `format`: dsim's mark on it (`dsim.fileio.dsim_wrote`)


@dataclass
class RunResult:
    requests: pd.DataFrame
    summary: dict
    steps: StepLog  # every replica's steps, replica by replica
    requested: np.ndarray  # output tokens the workload asked for (a cap in real mode)
    replica_steps: list[StepLog] = field(default_factory=list)  # each replica's own steps
    replica_work: list[int] = field(default_factory=list)  # tokens each still owed at the end


def simulate(spec: RunSpec, progress: Callable[[int, int], None] | None = None) -> RunResult:
    """Read `spec`'s inputs once, run its replicas with simulated acceptance."""
    return simulate_inputs(resolve(spec), progress)


def simulate_inputs(
    inputs: RunInputs, progress: Callable[[int, int], None] | None = None
) -> RunResult:
    """Run already resolved inputs' replicas with simulated acceptance (`dsim run` resolves
    first, to say what the run will ignore before it starts)."""
    backend = Simulated(inputs.acceptance)
    return run_engine(inputs.engine, inputs.workload, backend, progress=progress)


def run_engine(
    inputs: EngineInputs,
    workload: Workload,
    backend: Backend,
    clock: str | ClockMaker = "profile",
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Run the replicas over `workload` with `backend` executing the rounds (simulated or
    real). Each replica has its own engine, policy state, random stream
    (`dsim.cluster.topology`) and clock (`clock`: a name or a maker); the backend and the
    per-request records are shared.
    """
    spec, cfg, latency = inputs.spec, inputs.config, inputs.profile.latency
    make_clock = clock_maker(clock)
    draft_cost, policies = inputs.draft_cost, inputs.policy.instances()
    n = len(workload)
    records = Records.empty(n)
    rng = np.random.default_rng(spec.seed)
    backend.bind(n, rng)

    def make_replica(k: int, handoff) -> Replica:
        return Replica(
            workload,
            latency=latency,
            draft_cost=draft_cost,
            backend=backend,
            policy=next(policies),
            config=cfg,
            rng=replica_rng(spec.seed, k, rng),
            records=records,
            clock=make_clock(),
            index=k,
            handoff=handoff,
        )

    env = simpy.Environment()
    cluster = Cluster(
        env, inputs.topology, make_replica, workload.arrival_s, workload.prompt_tokens
    )
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
    summary["engine_limits"] = engine_limits(cfg)
    summary["engine_round"] = engine_round(draft_cost, cfg, cluster.replicas)
    summary.update(gpu_figures(inputs.profile.sidecar, len(logs), summary["throughput_tok_s"]))
    summary["drafter_kind"] = draft_cost.kind if inputs.policy.drafts else "none"
    summary["warnings"] = list(inputs.warnings)
    summary["trace"] = workload.about  # what the trace is, as read: a unit error shows here
    summary.update(replica_figures(requests, logs, cluster.shape.roles, summary["duration_s"]))
    summary.update(kv_transfer_figures(workload.prompt_tokens, inputs.topology))
    if records.finished != n:  # every request ends unless the engine stalled
        raise SimulationStuck(f"{n - records.finished} of {n} requests never finished")
    work = [r.work for r in cluster.replicas]
    return RunResult(requests, summary, steps, workload.output_tokens, logs, work)


def engine_round(draft_cost: DraftCost, cfg: EngineConfig, replicas: list[Replica]) -> dict:
    """The speculative round's engine terms the run priced rounds with (the profile's engine
    preset unless the spec overrides them) and how many decode steps paid the ragged penalty."""
    return {
        "per_round_s": draft_cost.spec_round.per_round_s,
        "host_pass_s": draft_cost.spec_round.host_pass_s,
        "ragged_penalty": cfg.ragged_penalty,
        "ragged_steps": int(sum(r.ragged_steps for r in replicas)),
    }


def engine_limits(cfg: EngineConfig) -> dict:
    """The limits the run's engine ran with, as resolved from the spec and the profile."""
    return {
        "kv_tokens": cfg.kv_tokens,
        "max_num_batched_tokens": cfg.token_budget,
        "prefill_chunk": cfg.prefill_chunk,
        "prefill_mixing": "mixed" if cfg.mixed_prefill else "separate",
        "admission": "reserve" if cfg.reserve_output else "recompute",
    }


def check_run_dir(out: str | Path, reads: Iterable[str | Path]) -> None:
    """`--out` of a run, before its work: a folder `write_run` may replace as a whole, holding
    none of the files the run `reads` (`dsim.fileio.check_replaced_dir`)."""
    check_replaced_dir(out, RUN_OWNER, RUN_FILES, reads)


def write_run(
    result: RunResult,
    spec: RunSpec,
    out: str | Path,
    extra: Callable[[Path], None] | None = None,
) -> None:
    """requests.parquet + summary.json (+ the spec, + what `extra(folder)` adds), replacing an
    earlier run's folder as a whole or not at all."""
    with atomic_dir(out, RUN_OWNER, RUN_FILES) as tmp:
        write_parquet(result.requests, tmp / "requests.parquet")
        summary = {
            **result.summary,
            "format": RUN_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "spec": spec.as_dict(),
        }
        write_json(tmp / "summary.json", summary)
        if extra is not None:
            extra(tmp)
