"""`dsim validate`: parse the options into `Settings` and run the study. The study (torch,
the real models) is imported when the command runs, so `dsim --help` starts fast."""

from __future__ import annotations

from pathlib import Path

import typer

from dsim import spec_grammar
from dsim.lab import require_lab
from dsim.models.target import SMOLLM2, TINY
from dsim.validation.settings import Settings, parse_loads

INPUTS, STUDY, RUNS = "Inputs", "Study", "Each run"
DEFAULTS = Settings()  # each default lives in Settings


REFERENCE_EVERY = typer.Option(
    DEFAULTS.reference_every,
    help="Verifies between reference passes: one pass of a fixed shape, timed inside every "
    "real run (outside its clock) to price it with the core's speed of the moment.",
    rich_help_panel=RUNS,
)
DRAWS = typer.Option(
    DEFAULTS.draws,
    help="Acceptance draws per simulated run: each real run is simulated this many times "
    "(seeds of their own, the run's first) and compared with their mean.",
    rich_help_panel=STUDY,
)
BUDGET_MINUTES = typer.Option(
    DEFAULTS.budget_minutes,
    help="Time the study plans to end within: the projected total is logged after the "
    "profiling phase, after the rate rule and after every run; past it, runs are shortened "
    "to fit (down to 0.8 of --requests), and a drifted triple is re-run only while the "
    "projection with the re-run stays within it (else it is kept, drifted).",
    rich_help_panel=STUDY,
)


def validate_cmd(
    out: Path = typer.Option(
        ..., help="Output folder (runs, profiles, report.md).", rich_help_panel=INPUTS
    ),
    drafter: Path = typer.Option(
        DEFAULTS.drafter, help="Drafter checkpoint (dsim train).", rich_help_panel=INPUTS
    ),
    acceptance: Path = typer.Option(
        DEFAULTS.acceptance,
        help="Acceptance trace of the same drafter, recorded on --prompts (dsim collect); "
        "its rows on the even rows drive the simulation.",
        rich_help_panel=INPUTS,
    ),
    prompts: Path = typer.Option(
        DEFAULTS.prompts,
        help="Held-out prompts (JSON lines); the odd rows are served.",
        rich_help_panel=INPUTS,
    ),
    profile: Path = typer.Option(
        None,
        help="Profile of the target (default: measure one on this machine first, "
        "1 torch thread, into OUT/profile.csv).",
        rich_help_panel=INPUTS,
    ),
    target: str = typer.Option(
        DEFAULTS.target, help=f"{SMOLLM2}, {TINY} or a HF folder.", rich_help_panel=INPUTS
    ),
    preset: str = typer.Option(
        DEFAULTS.preset, help="Parametric acceptance to compare.", rich_help_panel=STUDY
    ),
    policies: str = typer.Option(
        ",".join(DEFAULTS.policies), help="Policies, comma-separated.", rich_help_panel=STUDY
    ),
    loads: str = typer.Option(
        "light=0.333,moderate=0.667",
        help="NAME=BUSY,...: target busy fractions of the server under mtp1; each load's "
        "rate is the one the simulator gives that busy fraction.",
        rich_help_panel=STUDY,
    ),
    repeats: int = typer.Option(
        DEFAULTS.repeats,
        help="Runs per load and policy, seeds SEED, SEED+1, ...",
        rich_help_panel=STUDY,
    ),
    seed: int = typer.Option(
        DEFAULTS.seed, help="First seed (arrivals and sampling).", rich_help_panel=STUDY
    ),
    requests: int = typer.Option(DEFAULTS.requests, help="Requests per run.", rich_help_panel=RUNS),
    max_new_tokens: int = typer.Option(
        DEFAULTS.max_new_tokens, help="Output cap per request.", rich_help_panel=RUNS
    ),
    max_seqs: int = typer.Option(
        DEFAULTS.max_seqs, help="Concurrent requests cap.", rich_help_panel=RUNS
    ),
    reference_every: int = REFERENCE_EVERY,
    budget_minutes: float = BUDGET_MINUTES,
    draws: int = DRAWS,
) -> None:
    """Real mode (wall clock) vs trace- and preset-driven simulation at two loads, repeated
    with different seeds; writes OUT/validation.json, comparison.json, diagnostics.json and
    report.md (the accuracy targets marked met or missed)."""
    require_lab("dsim validate")
    from dsim.validation.study import validate

    settings = Settings(
        drafter=drafter, acceptance=acceptance, prompts=prompts, profile=profile, preset=preset,
        policies=spec_grammar.items(policies), loads=parse_loads(loads), repeats=repeats,
        requests=requests, max_new_tokens=max_new_tokens, max_seqs=max_seqs, seed=seed,
        target=target, reference_every=reference_every, budget_minutes=budget_minutes,
        draws=draws,
    )  # fmt: skip
    validate(settings, out, log=lambda line: typer.echo(line, err=True))


def register(app: typer.Typer) -> None:
    """Add `dsim validate`."""
    app.command("validate")(validate_cmd)
