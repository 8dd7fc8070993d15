"""CLI for the acceptance side: `dsim calibrate`, `dsim synth-acceptance` and
`dsim acceptance show`.

Library modules are imported inside the commands so that `dsim run` does not pay for scipy
and matplotlib at start-up.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dsim.fileio import check_output_file
from dsim.force_option import FORCE

METRICS = ("ECE", "AUC", "Brier")
SPECS = (
    "iid:A, positions:Q1,.. (latent means; spreads 0 by default, served as given), "
    "preset:D:DOM\\[overconf=X,noise=N], vllm:SCRAPE, tau:T@K (T tokens per verify round, "
    "bonus included, at K drafts: vLLM's mean acceptance length, SGLang's accept length; "
    "geometric shape assumed), mix:..."
)

acceptance_app = typer.Typer(
    help="Acceptance specs: show what dsim reads from one and what it serves (acceptance show "
    "SPEC).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the dsim app."""
    app.command("calibrate")(calibrate)
    app.command("synth-acceptance")(synth_acceptance)
    acceptance_app.command("show")(show)
    app.add_typer(acceptance_app, name="acceptance")


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
        typer.Option(help=SPECS),
    ],
    out: Annotated[Path, typer.Option(help="Trace to write, e.g. traces/acceptance/NAME.parquet")],
    gamma: Annotated[int, typer.Option(help="Draft block length.")] = 7,
    sequences: Annotated[int, typer.Option(help="Recorded sequences (one per request).")] = 200,
    rounds: Annotated[int, typer.Option(help="Rounds per sequence (without --tokens).")] = 128,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    tokens: Annotated[
        int | None,
        typer.Option(
            help="Record each sequence until it has emitted this many tokens, as a serving "
            "request does (its rounds then weigh as a served run's; --rounds is ignored).",
            show_default=False,
        ),
    ] = None,
    force: bool = FORCE,
) -> None:
    """Write an acceptance trace sampled from a parametric acceptance model."""
    from dsim.acceptance.sources import spec_files
    from dsim.acceptance.synth import write_synthetic_trace

    check_output_file(out, force, sidecar=True, reads=spec_files(acceptance))
    command = shlex.join(["dsim", *sys.argv[1:]])
    df = write_synthetic_trace(acceptance, gamma, sequences, rounds, seed, out, command, tokens)
    Console().print(f"wrote {out} ({len(df)} rounds, {sequences} sequences, gamma {gamma})")


def show(
    spec: Annotated[str, typer.Argument(help=f"Acceptance spec: {SPECS}, or a trace file.")],
    gamma: Annotated[
        int | None,
        typer.Option(
            help="Drafts per round (default: a scrape's positions, a tau's K, a trace's gamma, "
            "else 7).",
            show_default=False,
        ),
    ] = None,
    requests: Annotated[int, typer.Option(help="Simulated requests.")] = 2000,
    tokens: Annotated[int, typer.Option(help="Tokens each simulated request emits.")] = 300,
    seed: Annotated[int, typer.Option(help="Seed of the simulation.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Print the curves read from SPEC (a vLLM scrape's counters, a trace's rounds), tau at
    each gamma, and the curve a simulation serves from it at full verification, side by side;
    then how well its confidences tell accepted drafts from rejected ones (AUC, calibration)."""
    from dsim.acceptance.show import acceptance_report

    report = acceptance_report(spec, gamma, requests, tokens, seed)
    if as_json:
        typer.echo(json.dumps(report, indent=1))
        return
    console = Console(highlight=False)
    for line in _show_header(report):
        console.print(line, soft_wrap=True)
    console.print(_curve_table(report))
    console.print(_tau_table(report))
    console.print(_discrimination_table(report))


def _show_header(report: dict[str, Any]) -> list[str]:
    sim, read, model = report["simulated"], report["read"], report["model"]
    lines = [f"{report['spec']} at gamma {report['gamma']}"]
    if read is not None and read["kind"] == "tau":
        lines += [
            f"implied by the stated tau (tokens per verify round, bonus included: vLLM's mean "
            f"acceptance length, SGLang's accept length) at {read['positions']} drafts a round",
            f"shape (assumed): {read['shape']}; alpha = {read['alpha']:.4f}; cond = accepted / "
            "reached, uncond = accepted / rounds",
        ]
    elif read is not None:
        lines.append(
            f"read from the {read['kind']}: {read['drafts']:,.0f} rounds with drafts, "
            f"{read['positions']} positions; cond = accepted / reached, uncond = accepted / rounds"
        )
        if read["reached"] < report["gamma"]:
            lines.append(
                f"no round of the {read['kind']} reached position {read['reached'] + 1}: "
                "dsim never accepts a draft from there on"
            )
    if model is not None:
        kind = read["kind"] if read is not None else None
        stated = {"scrape": "a scrape", "tau": "a stated tau"}.get(kind)
        assumed = f" (assumed: {stated} has no per-request figures)" if stated else ""
        lines.append(
            f"model: spread {model['spread']:g}, spread_req {model['spread_req']:g}, "
            f"rho {model['rho']:g}, overconf {model['overconf']:g}, noise {model['noise']:g}"
            f"{assumed}"
        )
        lines.append(f"spreads and noise: {model['evidence']}")
    lines.append(
        f"simulated: {sim['requests']} requests x {sim['tokens']} tokens, full verification, "
        f"seed {sim['seed']}; se = binomial standard error"
    )
    return lines


def _label(read: dict[str, Any]) -> str:
    """What the stated curve is called: a tau's is implied, the others' read."""
    return "implied" if read["kind"] == "tau" else "read"


def _cell(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _curve_table(report: dict[str, Any]) -> Table:
    read, sim, model = report["read"], report["simulated"], report["model"]
    table = Table(title="acceptance per draft position")
    columns = ["pos"]
    if read is not None:
        columns += [f"{_label(read)} cond", f"{_label(read)} uncond"]
    if model is not None and "latent" in model:
        columns.append("latent mean")
    columns += ["simulated cond", "se", "rounds"]
    for name in columns:
        table.add_column(name, justify="right")
    for k in range(report["gamma"]):
        row = [str(k + 1)]
        if read is not None:
            row += [_cell(read["conditional"][k]), _cell(read["unconditional"][k])]
        if model is not None and "latent" in model:
            row.append(_cell(model["latent"][k]))
        row += [_cell(sim["conditional"][k]), _cell(sim["se"][k])]
        row.append(f"{sim['rounds_reaching'][k]:,}")
        table.add_row(*row)
    return table


def _tau_table(report: dict[str, Any]) -> Table:
    read, sim = report["read"], report["simulated"]
    table = Table(title="tau at each gamma")
    for name in ("gamma", *([_label(read)] if read is not None else []), "simulated"):
        table.add_column(name, justify="right")
    for g in range(report["gamma"]):
        cells = [f"{read['tau'][g]:.3f}"] if read is not None else []
        table.add_row(str(g + 1), *cells, f"{sim['tau'][g]:.3f}")
    return table


def _discrimination_table(report: dict[str, Any]) -> Table:
    """AUC and calibration of conf_k on the rounds reaching draft k, simulated (and recorded)."""
    sim, read = report["discrimination"]["simulated"], report["discrimination"]["read"]
    table = Table(title="confidence on rounds reaching each draft: AUC, bias (conf - rate), ECE")
    columns = ["pos"]
    if read is not None:
        columns += ["read AUC", "bias", "ECE"]
    columns += ["sim AUC", "bias", "ECE", "rounds"]
    for name in columns:
        table.add_column(name, justify="right")
    for k, d in enumerate(sim):
        row = [str(k + 1)]
        if read is not None:
            r = read[k] if k < len(read) else {"auc": None, "bias": None, "ece": None}
            row += [_cell(r["auc"]), _signed(r["bias"]), _cell(r["ece"])]
        row += [_cell(d["auc"]), _signed(d["bias"]), _cell(d["ece"]), f"{d['reached']:,}"]
        table.add_row(*row)
    return table


def _signed(x: float | None) -> str:
    return "-" if x is None else f"{x:+.4f}"
