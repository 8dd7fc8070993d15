"""`dsim serve`: the simulator's engine and policies driving the real drafter and target.

torch and transformers are imported when the command runs, so `dsim run` (simulation) and
`dsim --help` start fast.
`dsim serve` takes `dsim run`'s workload and engine options but no acceptance model (the real
drafter and target decide what is accepted) and no --gamma (the drafter checkpoint fixes it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path

import typer
from typer.models import OptionInfo

from dsim import run_commands as opts
from dsim.lab import require_lab
from dsim.models.target import SMOLLM2, TINY
from dsim.real.defaults import DEFAULT_PROMPTS
from dsim.report import progress_bar, warn
from dsim.run import check_run_dir
from dsim.run_inputs import input_files
from dsim.run_spec import RunSpec

CPU_PROFILE = "profiles/cpu-smollm2-135m.csv"
SERVE_TRACE = "synthetic:rate=0.5,n=32,output=128,sigma=0"  # a CPU-sized real workload
MODELS, WORKLOAD, ENGINE, OUTPUT = "Real models", "Workload", "Engine", "Output"


def grouped(option: OptionInfo, panel: str) -> OptionInfo:
    """A copy of a shared `dsim run` option, listed under `panel` in --help."""
    option = copy.copy(option)
    option.rich_help_panel = panel
    return option


@dataclass(frozen=True)
class RealModels:
    """What `dsim serve` runs for real; its other options make the RunSpec."""

    target: str
    drafter: Path | None
    prompts: Path
    max_new_tokens: int
    clock: str

    def files(self) -> tuple[Path, ...]:
        """What serving reads besides the spec's files: the prompts, the drafter checkpoint and
        a target given as a folder."""
        given = (self.prompts, self.drafter, Path(self.target))
        return tuple(p for p in given if p is not None and p.exists())


def serve(spec: RunSpec, models: RealModels, out: Path | None, progress: bool) -> None:
    """Check the options before any model is loaded, then serve and write OUT."""
    require_lab("dsim serve")
    import torch

    from dsim.models.checkpoint import drafter_gamma
    from dsim.real.runner import (
        check_options,
        load_models,
        profile_threads,
        run_real,
        write_real_run,
    )

    if models.drafter is not None:  # the checkpoint fixes gamma: check the policy against it
        spec = replace(spec, gamma=drafter_gamma(models.drafter))
    engine = check_options(spec, models.clock, models.drafter is not None)
    for line in engine.warnings:
        warn(line)
    if out is not None:
        check_run_dir(out, (*input_files(spec), *models.files()))
    threads = profile_threads(engine.profile.sidecar)
    if threads:
        torch.set_num_threads(threads)
    model, draft_model = load_models(models.target, models.drafter)
    with progress_bar("serving (real)", total=None, enabled=progress) as update:
        run = run_real(
            spec, model, draft_model, models.prompts, models.clock, models.max_new_tokens,
            progress=update,
        )  # fmt: skip
    if out is not None:
        write_real_run(run, out)
    opts.show(run.result, f"dsim serve: {spec.policy} on {Path(spec.trace).name}")


def serve_cmd(
    drafter: Path | None = typer.Option(
        None,
        help="Drafter checkpoint (dsim train); required unless --policy ar.",
        rich_help_panel=MODELS,
    ),
    target: str = typer.Option(
        SMOLLM2, help=f"{SMOLLM2}, {TINY} or a HF folder.", rich_help_panel=MODELS
    ),
    prompts: Path = typer.Option(
        DEFAULT_PROMPTS, help="Prompt file (JSON lines).", rich_help_panel=MODELS
    ),
    max_new_tokens: int = typer.Option(128, help="Output cap per request.", rich_help_panel=MODELS),
    clock: str = typer.Option(
        "profile",
        help="profile: steps take the profile's time (deterministic); wall: real.",
        rich_help_panel=MODELS,
    ),
    trace: str = typer.Option(
        SERVE_TRACE,
        help="Arrival trace file or synthetic:KEY=V,... (arrivals, output caps).",
        rich_help_panel=WORKLOAD,
    ),
    profile: str = typer.Option(
        CPU_PROFILE, help="Measured profile of the target.", rich_help_panel=ENGINE
    ),
    policy: str = grouped(opts.POLICY, ENGINE),
    calibration: str | None = typer.Option(
        None,
        help="STS calibration JSON applied to the drafter's confidences.",
        rich_help_panel=MODELS,
    ),
    seed: int = grouped(opts.SEED, WORKLOAD),
    window: str | None = grouped(opts.WINDOW, WORKLOAD),
    window_wrap: bool = grouped(opts.WINDOW_WRAP, WORKLOAD),
    rate_scale: float = grouped(opts.RATE_SCALE, WORKLOAD),
    max_requests: int | None = grouped(opts.MAX_REQUESTS, WORKLOAD),
    qps: float | None = grouped(opts.QPS, WORKLOAD),
    max_seqs: int = grouped(opts.MAX_SEQS, ENGINE),
    kv_tokens: int | None = grouped(opts.KV_TOKENS, ENGINE),
    prefill_chunk: int | None = grouped(opts.PREFILL_CHUNK, ENGINE),
    draft_cost: str = grouped(opts.DRAFT_COST, ENGINE),
    sla_tps: float | None = grouped(opts.SLA_TPS, ENGINE),
    sched_cost: str = grouped(opts.SCHED_COST, ENGINE),
    out: Path | None = typer.Option(
        None,
        help="Write requests.parquet, summary.json and texts.jsonl here.",
        rich_help_panel=OUTPUT,
    ),
    progress: bool = grouped(opts.PROGRESS, OUTPUT),
) -> None:
    """Serve a trace's arrivals with the real drafter and target through the simulator's
    engine and policies; generated texts go to OUT/texts.jsonl."""
    # the real drafter's draft() is one call per round, any policy: a block drafter's cost
    spec = opts.spec_from(locals(), drafter_kind="block")
    serve(spec, RealModels(target, drafter, prompts, max_new_tokens, clock), out, progress)


def register(app: typer.Typer) -> None:
    """Add `dsim serve`."""
    app.command("serve")(serve_cmd)
