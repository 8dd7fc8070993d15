"""A finished plan's outputs: plan.csv (every tier x configuration), points.csv (every point
run), plan.png (rate per GPU against GPUs, per tier) and report.md (per tier the winner, its
launch command, the best shipped configuration when the winner's policy is not shipped, the
closest configuration when none meets the tier), written together."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dsim.fileio import staged_files, write_with
from dsim.plan import answer, launch
from dsim.plan.search import Curve
from dsim.plan.tiers import Tier
from dsim.report import figure, markdown_table

TOP_ROWS = 10  # configurations listed per tier in report.md


@dataclass(frozen=True)
class About:
    """What the report says about the plan's inputs (its header)."""

    title: str
    traffic: str  # the trace and the load axis, in words
    lines: tuple[str, ...]  # search space, seeds, requests, notes
    acceptance: str
    draft_path: str | None
    target_rate: float | None
    budget: int
    load_unit: str  # "req/s" or "concurrent clients"


def points_table(curves: list[Curve], tiers: tuple[Tier, ...]) -> pd.DataFrame:
    """Every point the search ran: configuration, load, seed, the verdict per tier."""
    rows = []
    for curve in curves:
        for i in sorted(curve.runs):
            for r in curve.runs[i]:
                rows.append(
                    {"config": curve.config.label, "load": curve.loads[i], "seed": r["seed"],
                     "unstable": r["unstable"], "tps_p50": r["tps_p50"],
                     "ttft_p99_s": r["ttft_p99_s"], "tpot_p99_s": r["tpot_p99_s"],
                     "throughput_tok_s": r["throughput_tok_s"],
                     "request_throughput_req_s": r["request_throughput_req_s"],
                     "point": r["point"]}
                    | {f"meets {t.name}": t.met(r) for t in tiers}
                )  # fmt: skip
    return pd.DataFrame(rows)


def _command(row: pd.Series, configs: dict, about: About) -> list[str]:
    """The launch lines of `row`'s configuration, fenced, with their notes."""
    got = launch.launch(configs[row["config"]], about.acceptance, about.draft_path)
    if got is None:
        return [f"dsim knows no launch command for engine {row['engine']}.", ""]
    return ["```", *got.commands, "```", *(f"- {n}" for n in got.notes), ""]


def _describe(row: pd.Series, about: About) -> str:
    """`config`: its load, rate and figures per GPU (and the GPUs for the target)."""
    rate = "" if about.load_unit == "req/s" else f"{figure(row['rate_req_s'])} req/s; "
    text = (f"`{row['config']}`: up to {figure(row['max_load'])} {about.load_unit} ({rate}"
            f"{figure(row['rate_per_gpu'])} req/s and {figure(row['tok_s_per_gpu'])} tok/s "
            f"per GPU on {row['gpus']} GPU{'' if row['gpus'] == 1 else 's'})")  # fmt: skip
    if about.target_rate:
        copies = row["copies_for_target"]
        text += (f"; {about.target_rate:g} req/s takes {copies} cop"
                 f"{'y' if copies == 1 else 'ies'}, {row['gpus_for_target']} GPUs")  # fmt: skip
    if row["at_bracket_top"]:
        text += " (met at the top of its load grid: a floor, not the maximum)"
    return text


def _tier(rows: pd.DataFrame, tier: Tier, configs: dict, about: About) -> list[str]:
    out = [f"## Tier {tier.name}: {tier.bounds}", ""]
    why = answer.unmet(rows, about.target_rate, about.budget)
    if why is not None:
        if rows["met"].any():  # met, but the target rate takes more GPUs than the budget
            near = rows.iloc[0]  # ranked by GPUs for the target
            out += [f"**Not met: {why}.** Fewest: {_describe(near, about)}.", ""]
            return out + _ranked(rows, about)
        near = answer.closest(rows)
        out += [f"**Not met: {why}.** Closest: `{near['config']}`, which at its lowest load "
                f"run misses {near['misses_at_lowest_load']}.", ""]  # fmt: skip
        return out + _ranked(rows, about)
    best = answer.winner(rows, about.target_rate)
    out += [f"**Best:** {_describe(best, about)}.", ""]
    engine = best["engine"]
    if launch.shipped(best["policy"], engine) or engine not in launch.SHIPPED:
        return out + _command(best, configs, about) + _ranked(rows, about)
    out += [f"{engine} does not ship policy `{best['policy']}`.", ""]
    usable = rows[
        (rows["engine"] == engine) & rows["policy"].map(lambda p: launch.shipped(p, engine))
    ]
    alt = answer.winner(usable, about.target_rate)
    if alt is None:
        out += [f"No policy {engine} ships meets this tier.", ""]
    else:
        out += [f"**Best shipped by {engine}:** {_describe(alt, about)}.", ""]
        out += _command(alt, configs, about)
    return out + _ranked(rows, about)


def _ranked(rows: pd.DataFrame, about: About) -> list[str]:
    head = ["configuration", "GPUs", f"max load ({about.load_unit})", "step", "req/s/GPU",
            "tok/s/GPU", "tightest bound"]  # fmt: skip
    head += ["GPUs for target"] if about.target_rate else []
    cells = []
    for _, r in rows.head(TOP_ROWS).iterrows():
        step = f"{r['step']:.1%}" if pd.notna(r["step"]) else ""
        used = f"{r['bound_usage']:.0%}" if 0 < r["bound_usage"] < math.inf else ""
        line = [r["config"], str(r["gpus"]), figure(r["max_load"]), step,
                figure(r["rate_per_gpu"]), figure(r["tok_s_per_gpu"]), used]  # fmt: skip
        if about.target_rate:
            line.append("" if pd.isna(r["gpus_for_target"]) else str(int(r["gpus_for_target"])))
        cells.append(line)
    more = len(rows) - TOP_ROWS
    tail = [f"({more} more in plan.csv)"] if more > 0 else []
    return [markdown_table(head, cells), *tail, ""]


def render(table: pd.DataFrame, tiers: tuple[Tier, ...], curves: list[Curve], about: About):
    configs = {c.config.label: c.config for c in curves}
    out = [f"# {about.title}", "", f"- traffic: {about.traffic}"]
    out += [f"- {line}" for line in about.lines] + [""]
    for tier in tiers:
        out += _tier(table[table["tier"] == tier.name], tier, configs, about)
    return "\n".join(out) + "\n"


def write_outputs(
    out: Path, table: pd.DataFrame, points: pd.DataFrame, report: str, about: About
) -> None:
    """plan.csv, points.csv, plan.png and report.md, replaced together."""
    from dsim.plan.plot import plot_plan  # pyplot: only when writing

    with staged_files(out) as tmp:
        write_with(tmp / "plan.csv", lambda p: table.to_csv(p, index=False, float_format="%.6g"))
        write_with(tmp / "points.csv", lambda p: points.to_csv(p, index=False, float_format="%.6g"))
        plot_plan(table, about.title, about.target_rate is not None, tmp / "plan.png")
        (tmp / "report.md").write_text(report)
