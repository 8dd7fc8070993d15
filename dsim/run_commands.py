"""`dsim run`: simulate a replica or a cluster of them. Its workload and engine options are
shared with `dsim serve` (dsim/real/commands.py), which runs the same engine with real models."""

from __future__ import annotations

from pathlib import Path

import typer

from dsim.fileio import check_output_dir
from dsim.policies import policy_usage
from dsim.report import console, progress_bar, summary_table
from dsim.run import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_PROFILE,
    DEFAULT_TRACE,
    RUN_OWNER,
    RunResult,
    RunSpec,
    simulate,
    write_run,
)

# Options both commands take, with one spelling and one help text.
TRACE = typer.Option(DEFAULT_TRACE, help="Arrival trace file or synthetic:KEY=V,...")
PROFILE = typer.Option(DEFAULT_PROFILE, help="Hardware load profile CSV of the target.")
POLICY = typer.Option("dspark", help=f"{policy_usage()} (docs/policies.md)")
SEED = typer.Option(0, help="Random seed (same seed, same bytes).")
WINDOW = typer.Option(None, help="Keep arrivals in START:END seconds.")
RATE_SCALE = typer.Option(1.0, help="Scale the arrival rate (2 = twice the load).")
MAX_REQUESTS = typer.Option(None, help="Keep only the first N requests.")
MAX_SEQS = typer.Option(256, help="Concurrent requests cap.")
KV_TOKENS = typer.Option(500_000, help="KV-cache budget in tokens (16-token blocks).")
PREFILL_CHUNK = typer.Option(2048, help="Prefill tokens per step (chunked prefill).")
DRAFT_COST = typer.Option(
    "ratio:0.1", help="Drafter pass cost: 0 | ratio:X (X times the target) | profile CSV."
)
DRAFTER_KIND = typer.Option(
    "auto", help="auto (mtp1: MTP-1 head, else block) | block | ar: how a round's passes go."
)
SLA_TPS = typer.Option(None, help="Per-user tok/s the schedulers must keep.")
SCHED_COST = typer.Option(
    "auto", help="Synchronous schedulers' per-round cost: auto | auto:F | SECONDS."
)
PROGRESS = typer.Option(True, help="Show a progress bar.")
REPLICAS = typer.Option(
    1, help="Replicas behind the router, each its own engine (docs/cluster.md)."
)
ROUTER = typer.Option("round-robin", help="round-robin | least-loaded | kv-aware")
DISAGG = typer.Option(None, help="P:D prefill-only and decode replicas (replaces --replicas).")
KV_LINK_GBPS = typer.Option(400.0, help="Prefill-to-decode KV link bandwidth, Gbit/s (--disagg).")
KV_BYTES = typer.Option(None, help="KV bytes per token (default: the profile sidecar's model).")


def show(result: RunResult, title: str) -> None:
    console.print(summary_table(result.summary, title))
    console.print(f"step model: {result.summary['step_model']}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add `dsim run`."""

    @app.command("run")
    def run_cmd(
        trace: str = TRACE,
        profile: str = PROFILE,
        acceptance: str = typer.Option(
            DEFAULT_ACCEPTANCE,
            help="iid:A | positions:Q1,.. | preset:DRAFTER:DOMAIN | vllm:SCRAPE | mix:.. | FILE",
        ),
        policy: str = POLICY,
        gamma: int = typer.Option(7, help="Drafts proposed per round."),
        seed: int = SEED,
        window: str | None = WINDOW,
        rate_scale: float = RATE_SCALE,
        max_requests: int | None = MAX_REQUESTS,
        max_seqs: int = MAX_SEQS,
        kv_tokens: int = KV_TOKENS,
        prefill_chunk: int = PREFILL_CHUNK,
        draft_cost: str = DRAFT_COST,
        drafter_kind: str = DRAFTER_KIND,
        sla_tps: float | None = SLA_TPS,
        sched_cost: str = SCHED_COST,
        calibration: str | None = typer.Option(
            None,
            help="STS calibration JSON for an acceptance trace; 'raw' ignores the sidecar's.",
        ),
        out: Path | None = typer.Option(None, help="Write requests.parquet and summary.json here."),
        replicas: int = REPLICAS,
        router: str = ROUTER,
        disagg: str | None = DISAGG,
        kv_link_gbps: float = KV_LINK_GBPS,
        kv_bytes_per_token: float | None = KV_BYTES,
        progress: bool = PROGRESS,
    ) -> None:
        """Simulate replicas serving a trace under a verification policy."""
        spec = RunSpec(
            trace,
            profile,
            acceptance,
            policy,
            gamma,
            seed,
            window,
            rate_scale,
            max_requests,
            max_seqs,
            kv_tokens,
            prefill_chunk,
            draft_cost,
            sla_tps,
            calibration,
            sched_cost=sched_cost,
            drafter_kind=drafter_kind,
            replicas=replicas,
            router=router,
            disagg=disagg,
            kv_link_gbps=kv_link_gbps,
            kv_bytes_per_token=kv_bytes_per_token,
        )
        if out is not None:
            check_output_dir(out, RUN_OWNER)  # before the work, not after it
        with progress_bar("simulating requests", total=None, enabled=progress) as update:
            result = simulate(spec, progress=update)
        if out is not None:
            write_run(result, spec, out)
        show(result, f"dsim run: {policy} on {Path(trace).name}")
