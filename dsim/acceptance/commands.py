"""CLI for the measured-acceptance side: `dsim calibrate` and `dsim synth-acceptance`.

Library modules are imported inside the commands so that `dsim run` does not pay for scipy
and matplotlib at start-up.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

METRICS = ("ECE", "AUC", "Brier")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the dsim app."""
    app.command("calibrate")(calibrate)
    app.command("synth-acceptance")(synth_acceptance)


def calibrate(
    trace: Annotated[Path, typer.Argument(help="Acceptance trace (NAME.parquet + NAME.json).")],
    out: Annotated[
        Path | None,
        typer.Option(help="Output folder (default: runs/calibration/NAME).", show_default=False),
    ] = None,
    holdout: Annotated[
        float, typer.Option(help="Fraction of sequences held out for the reported metrics.")
    ] = 0.3,
    seed: Annotated[int, typer.Option(help="Seed of the held-out split.")] = 0,
    write_sidecar: Annotated[
        bool,
        typer.Option(
            "--write-sidecar/--no-write-sidecar",
            help="Also store the temperatures in the trace's sidecar (replay then applies them).",
        ),
    ] = False,
) -> None:
    """Fit Sequential Temperature Scaling; print ECE, AUC, Brier per position; save diagrams."""
    from dsim.acceptance.calibrate import calibrate_trace

    out = out or Path("runs/calibration") / trace.stem
    report = calibrate_trace(trace, out, holdout=holdout, seed=seed, write_sidecar=write_sidecar)
    console = Console()
    console.print(_metrics_table(report))
    console.print(f"wrote {out / 'calibration.json'} and {out / 'reliability.png'}")
    if write_sidecar:
        console.print(f"temperatures stored in {trace.with_suffix('.json')}")


def _metrics_table(report: dict[str, Any]) -> Table:
    split = report["split"]
    table = Table(
        title=f"STS on {split['report_rounds']} {split['metrics_on']} rounds "
        f"({split['report_sequences']} sequences)"
    )
    for name in ("pos", "T", "surv", *(f"{m} {t}" for m in METRICS for t in ("raw", "STS"))):
        table.add_column(name, justify="right")
    for m in report["metrics"]:
        table.add_row(
            str(m["position"]),
            f"{m['temperature']:.3f}",
            f"{m['survival_rate']:.3f}",
            *(_fmt(m[f"{key.lower()}_{t}"]) for key in METRICS for t in ("before", "after")),
        )
    return table


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def synth_acceptance(
    acceptance: Annotated[
        str,
        typer.Option(help="iid:A, positions:..., preset:D:DOM\\[overconf=X], vllm:SCRAPE, mix:..."),
    ],
    out: Annotated[Path, typer.Option(help="Trace to write, e.g. traces/acceptance/NAME.parquet")],
    gamma: Annotated[int, typer.Option(help="Draft block length.")] = 7,
    sequences: Annotated[int, typer.Option(help="Recorded sequences (one per request).")] = 200,
    rounds: Annotated[int, typer.Option(help="Rounds per sequence.")] = 128,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Write an acceptance trace sampled from a parametric acceptance model."""
    from dsim.acceptance.synth import write_synthetic_trace

    command = shlex.join(["dsim", *sys.argv[1:]])
    df = write_synthetic_trace(acceptance, gamma, sequences, rounds, seed, out, command)
    Console().print(f"wrote {out} ({len(df)} rounds, {sequences} sequences, gamma {gamma})")
