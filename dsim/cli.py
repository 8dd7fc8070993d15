"""The dsim command line: thin wrappers that parse, validate, call one function, map errors."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from dsim.acceptance import commands as acceptance_commands
from dsim.errors import InputError
from dsim.hardware import commands as hardware_commands
from dsim.models import commands as models_commands
from dsim.pareto import commands as pareto_commands
from dsim.real import commands as validate_commands
from dsim.report import console, progress_bar, summary_table
from dsim.run import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_PROFILE,
    DEFAULT_TRACE,
    RunSpec,
    simulate,
    write_run,
)

app = typer.Typer(
    help="dsim: design and compare speculative-decoding verification schedulers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for module in (
    hardware_commands,
    acceptance_commands,
    models_commands,
    pareto_commands,
    validate_commands,
):
    module.register(app)


@app.command()
def run(
    trace: str = typer.Option(DEFAULT_TRACE, help="Arrival trace file or synthetic:KEY=V,..."),
    profile: str = typer.Option(DEFAULT_PROFILE, help="Hardware load profile CSV of the target."),
    acceptance: str = typer.Option(
        DEFAULT_ACCEPTANCE, help="iid:A | positions:Q1,.. | preset:DRAFTER:DOMAIN | mix:.. | FILE"
    ),
    policy: str = typer.Option(
        "dspark",
        help="ar | mtp1 | fixed:K | threshold:h | goodput | dspark | dspark-async | oracle",
    ),
    gamma: int = typer.Option(7, help="Drafts proposed per round."),
    seed: int = typer.Option(0, help="Random seed (same seed, same bytes)."),
    window: str | None = typer.Option(None, help="Keep arrivals in START:END seconds."),
    rate_scale: float = typer.Option(1.0, help="Scale the arrival rate (2 = twice the load)."),
    max_requests: int | None = typer.Option(None, help="Keep only the first N requests."),
    max_seqs: int = typer.Option(256, help="Concurrent requests cap."),
    kv_tokens: int = typer.Option(500_000, help="KV-cache budget in tokens (16-token blocks)."),
    prefill_chunk: int = typer.Option(2048, help="Prefill tokens per step (chunked prefill)."),
    draft_cost: str = typer.Option(
        "ratio:0.1", help="Drafter pass cost: 0 | ratio:X (X times the target) | profile CSV."
    ),
    drafter_kind: str = typer.Option(
        "auto", help="auto (mtp1: MTP-1 head, else block) | block | ar: how a round's passes go."
    ),
    sla_tps: float | None = typer.Option(None, help="Per-user tok/s the schedulers must keep."),
    calibration: str | None = typer.Option(
        None,
        help="STS calibration JSON for an acceptance trace; 'raw' ignores a calibrated sidecar.",
    ),
    out: Path | None = typer.Option(None, help="Write requests.parquet and summary.json here."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    real: bool = typer.Option(False, help="Run the real drafter and target (--acceptance unused)."),
    target: str = typer.Option("smollm2-135m", help="--real: smollm2-135m, tiny or a HF folder."),
    drafter: Path | None = typer.Option(None, help="--real: drafter checkpoint (dsim train)."),
    prompts: Path = typer.Option(
        Path(validate_commands.DEFAULT_PROMPTS), help="--real: prompt file (JSON lines)."
    ),
    clock: str = typer.Option("profile", help="--real: profile (deterministic) or wall."),
    max_new_tokens: int = typer.Option(128, help="--real: output cap per request."),
) -> None:
    """Simulate one replica serving a trace under a verification policy (or serve it for real
    with --real: texts go to OUT/texts.jsonl)."""
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
        drafter_kind,
    )
    if real:
        with progress_bar("serving (real)", total=1, enabled=progress) as update:
            result = validate_commands.real_run(
                spec, target, drafter, prompts, clock, max_new_tokens, out, update
            )
    else:
        with progress_bar("simulating requests", total=None, enabled=progress) as update:
            result = simulate(spec, progress=update)
        if out is not None:
            write_run(result, spec, out)
    console.print(summary_table(result.summary, f"dsim run: {policy} on {Path(trace).name}"))
    console.print(f"step model: {result.summary['step_model']}", highlight=False)


def main() -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2."""
    try:
        app(standalone_mode=False)
    except InputError as err:
        print(f"dsim: error: {err}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("dsim: aborted", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:  # click usage errors carry their own exit code
        code = getattr(exc, "exit_code", None)
        if code is not None and hasattr(exc, "show"):
            exc.show()
            sys.exit(code)
        raise
