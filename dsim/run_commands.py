"""`dsim run`: simulate a replica or a cluster of them. Its workload and engine options are
shared with `dsim serve` (dsim/real/commands.py), which runs the same engine with real models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dsim.fileio import check_output_dir
from dsim.policies import policy_usage
from dsim.policies.commands import PLUGIN_TIMEOUT
from dsim.policies.plugin import set_call_limit
from dsim.report import console, progress_bar, summary_table
from dsim.run import RUN_OWNER, RunResult, simulate, write_run
from dsim.run_spec import SPEC_FIELDS, RunSpec, default

# `--help` groups the options in these panels.
WORKLOAD, ENGINE, SPECULATION, CLUSTER = "Workload", "Engine", "Speculation", "Cluster"


def option(field: str, help: str, panel: str):
    """A `dsim run` / `dsim serve` option for RunSpec field `field`, with the spec's default."""
    return typer.Option(default(field), help=help, rich_help_panel=panel)


# Options both commands take, with one spelling and one help text.
TRACE = option("trace", "Arrival trace file or synthetic:KEY=V,...", WORKLOAD)
PROFILE = option("profile", "Hardware load profile CSV of the target.", ENGINE)
POLICY = option("policy", f"{policy_usage()} (docs/policies.md)", SPECULATION)
SEED = option("seed", "Random seed (same seed, same bytes).", WORKLOAD)
WINDOW = option("window", "Keep arrivals in START:END seconds.", WORKLOAD)
RATE_SCALE = option("rate_scale", "Scale the arrival rate (2 = twice the load).", WORKLOAD)
MAX_REQUESTS = option("max_requests", "Keep only the first N requests.", WORKLOAD)
MAX_SEQS = option("max_seqs", "Concurrent requests cap.", ENGINE)
KV_TOKENS = option("kv_tokens", "KV-cache budget in tokens (16-token blocks).", ENGINE)
PREFILL_CHUNK = option("prefill_chunk", "Prefill tokens per step (chunked prefill).", ENGINE)
MAX_NUM_BATCHED_TOKENS = option(
    "max_num_batched_tokens",
    "Step token budget, as vLLM's: verify tokens (1 + gamma per running request) reserved "
    "first, prefill chunks fill the rest (default: none).",
    ENGINE,
)
DRAFT_COST = option(
    "draft_cost", "Drafter pass cost: 0 | ratio:X (X times the target) | profile CSV.", SPECULATION
)
DRAFTER_KIND = option(
    "drafter_kind",
    "auto (mtp1: MTP-1 head, else block) | block | ar: how a round's passes go.",
    SPECULATION,
)
SLA_TPS = option("sla_tps", "Per-user tok/s the schedulers must keep.", SPECULATION)
SCHED_COST = option(
    "sched_cost", "Synchronous schedulers' per-round cost: auto | auto:F | SECONDS.", SPECULATION
)
PROGRESS = typer.Option(True, help="Show a progress bar.")
REPLICAS = option(
    "replicas", "Replicas behind the router, each its own engine (docs/cluster.md).", CLUSTER
)
ROUTER = option("router", "round-robin | least-loaded | kv-aware", CLUSTER)
DISAGG = option("disagg", "P:D prefill-only and decode replicas (replaces --replicas).", CLUSTER)
KV_LINK_GBPS = option(
    "kv_link_gbps", "Prefill-to-decode KV link bandwidth, Gbit/s (--disagg).", CLUSTER
)
KV_BYTES = option(
    "kv_bytes_per_token", "KV bytes per token (default: the profile sidecar's model).", CLUSTER
)


def spec_from(options: dict[str, Any], **fixed: Any) -> RunSpec:
    """The RunSpec of a command's options (its RunSpec fields, by name), with `fixed` set."""
    return RunSpec(**{f: options[f] for f in SPEC_FIELDS if f in options}, **fixed)


def show(result: RunResult, title: str) -> None:
    console.print(summary_table(result.summary, title))
    console.print(f"step model: {result.summary['step_model']}", highlight=False)


def run_cmd(
    trace: str = TRACE,
    profile: str = PROFILE,
    acceptance: str = option(
        "acceptance",
        "iid:A | positions:Q1,.. | preset:DRAFTER:DOMAIN | vllm:SCRAPE | mix:.. | FILE",
        SPECULATION,
    ),
    policy: str = POLICY,
    gamma: int = option("gamma", "Drafts proposed per round.", SPECULATION),
    seed: int = SEED,
    window: str | None = WINDOW,
    rate_scale: float = RATE_SCALE,
    max_requests: int | None = MAX_REQUESTS,
    max_seqs: int = MAX_SEQS,
    kv_tokens: int = KV_TOKENS,
    prefill_chunk: int = PREFILL_CHUNK,
    max_num_batched_tokens: int | None = MAX_NUM_BATCHED_TOKENS,
    draft_cost: str = DRAFT_COST,
    drafter_kind: str = DRAFTER_KIND,
    sla_tps: float | None = SLA_TPS,
    sched_cost: str = SCHED_COST,
    calibration: str | None = option(
        "calibration",
        "STS calibration JSON for an acceptance trace; 'raw' ignores the sidecar's.",
        SPECULATION,
    ),
    out: Path | None = typer.Option(None, help="Write requests.parquet and summary.json here."),
    replicas: int = REPLICAS,
    router: str = ROUTER,
    disagg: str | None = DISAGG,
    kv_link_gbps: float = KV_LINK_GBPS,
    kv_bytes_per_token: float | None = KV_BYTES,
    progress: bool = PROGRESS,
    plugin_timeout: float = PLUGIN_TIMEOUT,
) -> None:
    """Simulate replicas serving a trace under a verification policy."""
    spec = spec_from(locals())
    set_call_limit(plugin_timeout)
    if out is not None:
        check_output_dir(out, RUN_OWNER)  # before the work, not after it
    with progress_bar("simulating requests", total=None, enabled=progress) as update:
        result = simulate(spec, progress=update)
    if out is not None:
        write_run(result, spec, out)
    show(result, f"dsim run: {policy} on {Path(trace).name}")


def register(app: typer.Typer) -> None:
    """Add `dsim run`."""
    app.command("run")(run_cmd)
