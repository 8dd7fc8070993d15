"""CLI for real-model mode: `dsim serve` and `dsim validate`.

torch and transformers are imported inside the functions, so `dsim run` (simulation) and
`dsim --help` start fast.
`dsim serve` takes `dsim run`'s workload and engine options but no acceptance model (the real
drafter and target decide what is accepted) and no --gamma (the drafter checkpoint fixes it).
"""

from __future__ import annotations

from pathlib import Path

import typer

from dsim import run_commands as opts
from dsim import spec_grammar
from dsim.fileio import check_output_dir
from dsim.models.target import SMOLLM2, TINY
from dsim.real.defaults import DEFAULT_DRAFTER, DEFAULT_PROMPTS, DEFAULT_REPEATS, DEFAULT_TRACE
from dsim.report import progress_bar
from dsim.run import RUN_OWNER
from dsim.run_spec import RunSpec

CPU_PROFILE = "profiles/cpu-smollm2-135m.csv"
SERVE_TRACE = "synthetic:rate=0.5,n=32,output=128,sigma=0"  # a CPU-sized real workload


def register(app: typer.Typer) -> None:
    """Add `dsim serve` and `dsim validate`."""

    @app.command("serve")
    def serve_cmd(
        drafter: Path | None = typer.Option(
            None, help="Drafter checkpoint (dsim train); required unless --policy ar."
        ),
        target: str = typer.Option(SMOLLM2, help=f"{SMOLLM2}, {TINY} or a HF folder."),
        prompts: Path = typer.Option(DEFAULT_PROMPTS, help="Prompt file (JSON lines)."),
        max_new_tokens: int = typer.Option(128, help="Output cap per request."),
        clock: str = typer.Option(
            "profile", help="profile: steps take the profile's time (deterministic); wall: real."
        ),
        trace: str = typer.Option(
            SERVE_TRACE, help="Arrival trace file or synthetic:KEY=V,... (arrivals, output caps)."
        ),
        profile: str = typer.Option(CPU_PROFILE, help="Measured profile of the target."),
        policy: str = opts.POLICY,
        calibration: str | None = typer.Option(
            None, help="STS calibration JSON applied to the drafter's confidences."
        ),
        seed: int = opts.SEED,
        window: str | None = opts.WINDOW,
        rate_scale: float = opts.RATE_SCALE,
        max_requests: int | None = opts.MAX_REQUESTS,
        max_seqs: int = opts.MAX_SEQS,
        kv_tokens: int = opts.KV_TOKENS,
        prefill_chunk: int = opts.PREFILL_CHUNK,
        draft_cost: str = opts.DRAFT_COST,
        sla_tps: float | None = opts.SLA_TPS,
        sched_cost: str = opts.SCHED_COST,
        out: Path | None = typer.Option(
            None, help="Write requests.parquet, summary.json and texts.jsonl here."
        ),
        progress: bool = opts.PROGRESS,
    ) -> None:
        """Serve a trace's arrivals with the real drafter and target through the simulator's
        engine and policies; generated texts go to OUT/texts.jsonl."""
        import torch

        from dsim.real.runner import (
            check_options,
            load_models,
            profile_threads,
            run_real,
            write_real_run,
        )

        spec = RunSpec(
            trace=trace,
            profile=profile,
            policy=policy,
            seed=seed,
            window=window,
            rate_scale=rate_scale,
            max_requests=max_requests,
            max_seqs=max_seqs,
            kv_tokens=kv_tokens,
            prefill_chunk=prefill_chunk,
            draft_cost=draft_cost,
            sla_tps=sla_tps,
            sched_cost=sched_cost,
            drafter_kind="block",  # the real drafter's draft() is one call per round, any policy
            calibration=calibration,
        )
        engine = check_options(spec, clock, drafter is not None)  # before any model is loaded
        if out is not None:
            check_output_dir(out, RUN_OWNER)
        threads = profile_threads(engine.profile.sidecar)
        if threads:
            torch.set_num_threads(threads)
        model, draft_model = load_models(target, drafter)
        with progress_bar("serving (real)", total=None, enabled=progress) as update:
            run = run_real(
                spec, model, draft_model, prompts, clock, max_new_tokens, progress=update
            )
        if out is not None:
            write_real_run(run, out)
        opts.show(run.result, f"dsim serve: {policy} on {Path(trace).name}")

    @app.command("validate")
    def validate_cmd(
        out: Path = typer.Option(..., help="Output folder (runs, profiles, report.md)."),
        drafter: Path = typer.Option(DEFAULT_DRAFTER, help="Drafter checkpoint (dsim train)."),
        acceptance: Path = typer.Option(
            DEFAULT_TRACE,
            help="Acceptance trace of the same drafter, recorded on --prompts (dsim collect); "
            "its rows on the even rows drive the simulation.",
        ),
        prompts: Path = typer.Option(
            DEFAULT_PROMPTS, help="Held-out prompts (JSON lines); the odd rows are served."
        ),
        profile: Path = typer.Option(
            None,
            help="Profile of the target (default: measure one on this machine first, "
            "1 torch thread, into OUT/profile.csv).",
        ),
        preset: str = typer.Option("preset:dspark:chat", help="Parametric acceptance to compare."),
        policies: str = typer.Option("mtp1,fixed:4,dspark", help="Policies, comma-separated."),
        loads: str = typer.Option(
            "light=0.333,moderate=0.667",
            help="NAME=BUSY,...: target busy fractions of the server under mtp1; each load's "
            "rate is the one the simulator gives that busy fraction.",
        ),
        repeats: int = typer.Option(
            DEFAULT_REPEATS, help="Runs per load and policy, seeds SEED, SEED+1, ..."
        ),
        requests: int = typer.Option(10, help="Requests per run."),
        max_new_tokens: int = typer.Option(64, help="Output cap per request."),
        max_seqs: int = typer.Option(16, help="Concurrent requests cap."),
        seed: int = typer.Option(0, help="First seed (arrivals and sampling)."),
        target: str = typer.Option(SMOLLM2, help=f"{SMOLLM2}, {TINY} or a HF folder."),
    ) -> None:
        """Real mode (wall clock) vs trace- and preset-driven simulation at two loads, repeated
        with different seeds; writes OUT/validation.json, comparison.json, diagnostics.json and
        report.md (the targets of issue 17 marked met or missed)."""
        from dsim.real.validate import Settings, parse_loads, validate

        settings = Settings(
            drafter,
            acceptance,
            prompts,
            profile,
            preset,
            spec_grammar.items(policies),
            parse_loads(loads),
            repeats,
            requests,
            max_new_tokens,
            max_seqs,
            seed,
            target,
        )
        validate(settings, out, log=lambda line: typer.echo(line, err=True))
