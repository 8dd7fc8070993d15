"""`dsim pareto`: a sweep of policies x loads, its frontiers, plots and report."""

from __future__ import annotations

from pathlib import Path

import typer

from dsim.pareto.pipeline import prepare, run_pareto
from dsim.pareto.sweep import unfinished
from dsim.policies.commands import PLUGIN_TIMEOUT
from dsim.policies.plugin import set_call_limit
from dsim.report import console, progress_bar, warn
from dsim.size_gate import YES


def register(app: typer.Typer) -> None:
    """Add `dsim pareto` to the dsim app."""

    @app.command("pareto")
    def pareto(
        config: Path = typer.Option(
            ..., help="Sweep config TOML (docs/pareto.md; e.g. docs/examples/h100_sweep.toml)."
        ),
        out: Path = typer.Option(..., help="Output directory; re-running resumes from it."),
        executor: str = typer.Option("local", help="local (process pool) | ray (Ray tasks)."),
        address: str | None = typer.Option(None, help="Ray cluster address (default: local)."),
        jobs: int = typer.Option(2, help="Worker processes (local) or CPUs of a local Ray."),
        progress: bool = typer.Option(True, help="Show a progress bar."),
        plugin_timeout: float = PLUGIN_TIMEOUT,
        yes: bool = YES,
    ) -> None:
        """Sweep policies over loads; write points, frontiers, pareto.png, load.png, report.md."""
        set_call_limit(plugin_timeout)  # the workers take it with them
        cfg, points = prepare(config, executor, jobs, yes)  # every input check, before any work
        for line in cfg.warnings:
            warn(line)
        with progress_bar("points", total=len(points), enabled=progress) as bar:
            bar.resume(len(points) - len(unfinished(points, out)))
            table = run_pareto(cfg, points, out, executor, jobs, address, bar)
        console.print(f"{len(table)} points -> {out / 'report.md'}")
