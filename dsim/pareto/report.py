"""report.md: the figures a reader decides from, as Markdown tables."""

from __future__ import annotations

import math

import pandas as pd

from dsim.pareto.analysis import Analysis
from dsim.pareto.config import BEST_FIXED, SweepConfig
from dsim.report import markdown_table

_POINT_COLUMNS = {
    "throughput_tok_s": ("throughput tok/s", "{:.0f}"),
    "tps_p50": ("median tok/s/user", "{:.1f}"),
    "mean_batch_size": ("concurrency", "{:.1f}"),
    "mean_verify_budget": ("verify budget", "{:.2f}"),
    "accepted_length_mean": ("tau", "{:.2f}"),
    "ttft_p50_s": ("TTFT p50 s", "{:.3f}"),
    "ttft_p99_s": ("TTFT p99 s", "{:.3f}"),
    "steady_throughput_tok_s": ("steady tok/s", "{:.0f}"),
    "queue_growth": ("queue growth", "{:+.0f}"),
}


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.0%}"


def _called(lo: float, hi: float, null: float) -> bool:
    """A difference is called only where every seed puts it on the same side of `null`."""
    return lo > null or hi < null


def _gain(hit: pd.Series, seeds: int) -> str:
    """Gain, with its min..max over seeds and a `~` where that range contains no change."""
    if seeds == 1:
        return _pct(hit["gain"])
    lo, hi = hit["gain_min"], hit["gain_max"]
    mark = "" if _called(lo, hi, 0.0) else " ~"
    return f"{_pct(hit['gain'])} [{_pct(lo)}..{_pct(hi)}]{mark}"


def gains_section(gains: pd.DataFrame, baseline: str, seeds: int = 1) -> str:
    """Gain over the baseline at each matched throughput, and each policy's range."""
    if gains.empty:
        return "No policy's frontier overlaps the baseline's in throughput.\n"
    summary = [
        [policy, f"{g['throughput_tok_s'].min():.0f}-{g['throughput_tok_s'].max():.0f}",
         f"{_pct(g['gain'].min())} to {_pct(g['gain'].max())}"]
        for policy, g in gains.dropna(subset=["gain"]).groupby("policy", sort=False)
    ]  # fmt: skip
    levels = sorted(gains["throughput_tok_s"].unique())
    policies = list(gains["policy"].unique())
    by_level = gains.set_index(["policy", "throughput_tok_s"])
    base = gains.groupby("throughput_tok_s")["baseline_tps_p50"].first()
    detail = []
    for level in levels:
        row = [f"{level:.0f}", f"{base[level]:.1f}"]
        for policy in policies:
            hit = by_level.loc[(policy, level)]
            reached = not math.isnan(hit["tps_p50"])
            row.append(f"{hit['tps_p50']:.1f} ({_gain(hit, seeds)})" if reached else "n/a")
        detail.append(row)
    return (
        markdown_table(
            ["policy", "matched throughput range tok/s", f"speed gain over {baseline}"], summary
        )
        + "\n\nMedian per-user tok/s at matched throughput (gain over the baseline):\n\n"
        + markdown_table(["throughput tok/s", baseline, *policies], detail)
        + "\n"
    )


def sla_section(sla: pd.DataFrame, baseline: str, seeds: int = 1) -> str:
    """Max throughput per policy at each anchor; the ratio to the baseline in brackets."""
    if sla.empty:
        return "No SLA anchors configured.\n"
    policies = list(sla["policy"].unique())
    rows = []
    for anchor, group in sla.groupby("sla_tps", sort=True):
        cells = [f"{anchor:g}"]
        for policy in policies:
            hit = group[group["policy"] == policy].iloc[0]
            best, ratio = hit["max_throughput_tok_s"], hit["ratio"]
            if math.isnan(best):
                cells.append("cannot meet")
            elif policy == baseline:
                cells.append(f"{best:.0f}")
            else:
                shown = f"{baseline} cannot meet" if math.isinf(ratio) else f"x{ratio:.2f}"
                if seeds > 1 and not math.isinf(ratio):
                    lo, hi = hit["ratio_min"], hit["ratio_max"]
                    mark = "" if _called(lo, hi, 1.0) else " ~"
                    shown += f" [x{lo:.2f}..x{hi:.2f}]{mark}"
                cells.append(f"{best:.0f} ({shown})")
        rows.append(cells)
    return markdown_table(["SLA tok/s/user", *policies], rows) + "\n"


def points_section(points: pd.DataFrame, axis: str) -> str:
    seeds = "seed" in points and points["seed"].nunique() > 1
    layouts = "layout" in points and (points["layout"] != "").any()
    columns = {k: v for k, v in _POINT_COLUMNS.items() if k in points}
    met = "sla_met" in points
    header = [
        "policy",
        *(["layout"] if layouts else []),
        axis,
        "req/s",
        *(["seed"] if seeds else []),
        *(v[0] for v in columns.values()),
        *(["SLA met (seeds)"] if met else []),
        "excluded",
    ]
    rows = [
        [
            row["policy"],
            *([row["layout"]] if layouts else []),
            f"{row['load']:g}",
            f"{row.get('arrival_rate_req_s', math.nan):.2f}",
            *([f"{row['seed']}"] if seeds else []),
        ]
        + [fmt.format(row[col]) for col, (_, fmt) in columns.items()]
        + ([row["sla_met"]] if met else [])
        + [row.get("excluded", "") or "-"]
        for _, row in points.iterrows()
    ]
    return markdown_table(header, rows) + "\n"


def per_gpu_section(sla: pd.DataFrame) -> str:
    """Maximum throughput per GPU at each anchor, one row per layout and policy: more replicas
    always win on throughput, so layouts are compared per GPU."""
    if sla.empty or sla["gpus"].isna().all():
        return "The profiles do not say their GPU counts: no per-GPU comparison.\n"
    anchors = sorted(sla["sla_tps"].unique())
    rows = []
    for (layout, policy), group in sla.groupby(["layout", "policy"], sort=False):
        by_anchor = group.set_index("sla_tps")["max_throughput_per_gpu"]
        gpus = group["gpus"].iloc[0]
        cells = [f"{by_anchor[a]:.0f}" if not math.isnan(by_anchor[a]) else "n/a" for a in anchors]
        rows.append([layout or "-", policy, "n/a" if math.isnan(gpus) else f"{gpus:g}", *cells])
    header = ["layout", "policy", "GPUs", *(f"SLA {a:g}" for a in anchors)]
    return markdown_table(header, rows) + "\n"


def _per_layout(table: pd.DataFrame, render, *args) -> str:
    """One section per layout (one, unheaded, without a [layout] table)."""
    if table.empty or (table["layout"] == "").all():
        return render(table, *args)
    return "\n".join(
        f"### {layout}\n\n" + render(part, *args)
        for layout, part in table.groupby("layout", sort=False)
    )


def _baseline_text(cfg: SweepConfig) -> str:
    if cfg.baseline != BEST_FIXED:
        return f"baseline `{cfg.baseline}`"
    members = ", ".join(cfg.baseline_members)
    return f"baseline `{BEST_FIXED}` (the best of {members} at each throughput)"


def _exclusion_text(cfg: SweepConfig, points: pd.DataFrame) -> str:
    bounds = "".join(f", missing {b}" for b in cfg.sla.bounds)
    dropped = points.drop_duplicates(["policy", "layout", "load"])
    n = int((dropped["excluded"] != "").sum())
    text = (
        f"- {n} of {len(dropped)} policy-load points excluded (unstable{bounds}; "
        "docs/pareto.md): drawn hollow, never on a frontier, an anchor or a gain\n"
    )
    if cfg.sla.bounds and "sla_met" in dropped:
        count = dropped["sla_met"].value_counts()
        seeds = "every seed" if len(cfg.seeds) > 1 else "its seed"
        text += (
            f"- tail SLA ({', '.join(map(str, cfg.sla.bounds))}), per point over {seeds}: "
            f"met in all {count.get('all', 0)}, in some {count.get('some', 0)}, "
            f"in none {count.get('none', 0)}\n"
        )
    return text


def render_report(cfg: SweepConfig, points: pd.DataFrame, result: Analysis) -> str:
    spec, seeds = cfg.base, len(cfg.seeds)
    gains, sla = result.gains, result.sla
    seed_text = f"seed {spec.seed}" if seeds == 1 else f"seeds {', '.join(map(str, cfg.seeds))}"
    spread = (
        "One seed: no spread is measured, so differences of a few percent are not established.\n"
        if seeds == 1
        else f"Each figure is the mean over {seeds} seeds, read off each seed's own frontier; "
        "[min..max] is its range over the seeds. A difference is called only where it exceeds "
        "that spread, i.e. every seed puts it on the same side (gain of 0, ratio of 1); "
        "`~` marks the figures where it does not.\n"
    )
    window = f", window {spec.window} s of the scaled timeline" if spec.window else ""
    layouts = "; ".join(lay.label for lay in cfg.layouts)
    kv = (
        f"KV budget {spec.kv_tokens} tokens"
        if spec.kv_tokens is not None
        else "KV budget the profile's (its sidecar's `memory.kv_capacity_tokens`)"
    )
    setup = (
        f"- trace `{spec.trace}`{window}\n"
        f"- profile `{spec.profile}`, gamma {spec.gamma}, acceptance `{spec.acceptance}`\n"
        f"- draft cost `{spec.draft_cost}`, {kv}, {seed_text}\n"
        f"- load axis `{cfg.load_axis}`: {', '.join(f'{v:g}' for v in cfg.loads)}\n"
        + (f"- layouts (crossed with the load axis): {layouts}\n" if layouts else "")
        + f"- {len(points)} points; {_baseline_text(cfg)}; speeds are medians over requests\n"
        + _exclusion_text(cfg, points)
        + "".join(f"- warning: {line}\n" for line in cfg.warnings)
    )
    name = cfg.baseline
    return (
        f"# Pareto sweep: {cfg.path.stem}\n\n"
        + (f"{cfg.description}\n\n" if cfg.description else "")
        + f"Config `{cfg.path}`.\n\n{setup}\n{spread}\n"
        + f"## Per-user speed at matched throughput (over `{name}`)\n\n"
        + "Interpolated linearly on each policy's Pareto frontier, only inside the throughput "
        + "range all the frontiers share.\n\n"
        + _per_layout(gains, gains_section, name, seeds)
        + "\n## Maximum throughput at each SLA anchor (tok/s)\n\n"
        + "Highest throughput on the frontier whose median per-user speed meets the anchor "
        + '(interpolated between swept points); "cannot meet" = not even at the lightest load.'
        + "\n\n"
        + _per_layout(sla, sla_section, name, seeds)
        + "\n## Maximum throughput per GPU at each SLA anchor (tok/s/GPU)\n\n"
        + per_gpu_section(sla)
        + "\n## All points\n\n"
        + "Concurrency is the mean number of running requests per step (time-weighted); steady "
        + "tok/s and queue growth are over the 10-90% window of the arrivals (docs/pareto.md).\n\n"
        + points_section(points, cfg.load_axis)
    )
