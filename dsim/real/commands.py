"""CLI for real-model mode: `dsim validate`, and the function behind `dsim run --real`.

torch and transformers are imported inside the functions, so `dsim run` (simulation) and
`dsim --help` start fast.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from dsim.errors import InputError
from dsim.run import RunResult, RunSpec

DEFAULT_PROMPTS = "traces/prompts/heldout.jsonl"


def real_run(
    spec: RunSpec,
    target: str,
    drafter: Path | None,
    prompts: Path,
    clock: str,
    max_new_tokens: int,
    out: Path | None,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """`dsim run --real`: load the models (torch threads as in the profile), serve, write."""
    import torch

    from dsim.real.runner import (
        check_options,
        load_models,
        profile_threads,
        run_real,
        write_real_run,
    )

    check_options(spec, clock, drafter is not None)
    threads = profile_threads(spec.profile)
    if threads:
        torch.set_num_threads(threads)
    model, draft_model = load_models(target, drafter)
    run = run_real(spec, model, draft_model, prompts, clock, max_new_tokens, progress=progress)
    if out is not None:
        write_real_run(run, out)
    return run.result


def register(app: typer.Typer) -> None:
    """Add `dsim validate`."""

    @app.command("validate")
    def validate_cmd(
        drafter: Path = typer.Option(..., help="Drafter checkpoint (dsim train)."),
        acceptance: Path = typer.Option(
            ..., help="Acceptance trace of the same drafter (dsim collect)."
        ),
        prompts: Path = typer.Option(DEFAULT_PROMPTS, help="Prompt file (JSON lines)."),
        profile: Path = typer.Option(
            None,
            help="Profile of the target (default: measure one on this machine first, "
            "1 torch thread, into OUT/profile.csv).",
        ),
        preset: str = typer.Option("preset:dspark:chat", help="Parametric acceptance to compare."),
        policies: str = typer.Option("mtp1,fixed:4,dspark", help="Policies, comma-separated."),
        requests: int = typer.Option(32, help="Requests in the workload."),
        rate: float = typer.Option(0.5, help="Poisson arrival rate (requests/s)."),
        max_new_tokens: int = typer.Option(64, help="Output cap per request."),
        max_seqs: int = typer.Option(16, help="Concurrent requests cap."),
        seed: int = typer.Option(0, help="Arrival and sampling seed."),
        target: str = typer.Option("smollm2-135m", help="smollm2-135m, tiny or a HF folder."),
        out: Path = typer.Option(Path("experiments/validation"), help="Output folder."),
    ) -> None:
        """Real mode (wall clock) vs trace- and preset-driven simulation of the same workload;
        prints the errors and writes OUT/validation.json."""
        from dsim.real.validate import Settings, validate

        if requests < 1 or rate <= 0:
            raise InputError(None, None, "--requests must be >= 1 and --rate > 0")
        settings = Settings(
            drafter,
            acceptance,
            prompts,
            profile,
            preset,
            tuple(p.strip() for p in policies.split(",") if p.strip()),
            requests,
            rate,
            max_new_tokens,
            max_seqs,
            seed,
            target,
        )
        validate(settings, out, log=typer.echo)
