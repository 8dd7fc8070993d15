"""`dsim pareto` end to end: config -> sweep -> points, frontier, plots, report in DIR."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from dsim.fileio import check_output_dir, check_writable, staged_files, write_parquet
from dsim.pareto.analysis import analyse
from dsim.pareto.config import SweepConfig, load_config
from dsim.pareto.report import render_report
from dsim.pareto.size import sweep_size
from dsim.pareto.sweep import Point, check_executor, make_points, run_sweep
from dsim.size_gate import check_size


def prepare(
    config: str | Path, executor: str, jobs: int, yes: bool = False
) -> tuple[SweepConfig, list[Point]]:
    """Every check that can fail on input, before anything is simulated or written; the size
    gate (`dsim.size_gate`) before a spec is built per point, so a huge sweep is refused at
    once."""
    cfg = load_config(config)
    check_executor(executor, jobs)
    check_size(sweep_size(cfg, jobs), yes, config)
    return cfg, make_points(cfg.specs())


# What marks a folder as a sweep's: its table, or the points folder a sweep makes first (so an
# interrupted first sweep resumes).
SWEEP_OWNERS = ("points.parquet", "points")


def check_out(out: Path) -> None:
    """`--out` as `dsim run` checks it (absent, empty or a sweep's own), and writable; before
    any point runs."""
    check_output_dir(out, SWEEP_OWNERS)
    check_writable(out)


def write_outputs(cfg: SweepConfig, points: pd.DataFrame, out: Path) -> None:
    """points.parquet, frontier.parquet, pareto.png, load.png and report.md, as one set."""
    from dsim.pareto.plots import plot_load, plot_pareto  # pyplot: not on every command's path

    result = analyse(cfg, points)  # marks the points that do not count (docs/pareto.md)
    profile = "" if any("profile" in lay.fields for lay in cfg.layouts) else cfg.base.profile
    title = f"{cfg.path.stem}: {Path(profile).stem or 'profiles'}, gamma {cfg.base.gamma}"
    report = render_report(cfg, points, result)
    with staged_files(out) as tmp:  # the five outputs are replaced together
        for name, table in (("points", points), ("frontier", result.front)):
            write_parquet(table, tmp / f"{name}.parquet")
        plot_pareto(cfg, points, result, title, tmp / "pareto.png")
        plot_load(result.means, title, tmp / "load.png")
        (tmp / "report.md").write_text(report)


def run_pareto(
    cfg: SweepConfig,
    points: list[Point],
    out: str | Path,
    executor: str = "local",
    jobs: int = 2,
    address: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Run (or resume) the prepared sweep and write every output under `out`."""
    out = Path(out)
    check_out(out)
    table = run_sweep(points, out, executor, jobs, address, progress)
    table.insert(1, "load_axis", cfg.load_axis)
    table.insert(2, "layout", [cfg.layout_of(p.spec) for p in points])
    write_outputs(cfg, table, out)
    return table
