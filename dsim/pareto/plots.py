"""The two pictures of a sweep: the Pareto frontiers and the load curves."""

from __future__ import annotations

import hashlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dsim.fileio import write_png  # noqa: E402
from dsim.pareto.analysis import Analysis  # noqa: E402
from dsim.pareto.config import BEST_FIXED, SweepConfig  # noqa: E402
from dsim.pareto.frontier import X, Y, speed_at_throughput  # noqa: E402
from dsim.policies.registry import BUILT_INS, plugin_ref  # noqa: E402


def save_figure(fig: plt.Figure, path: Path) -> None:
    """PNG without a timestamp or version stamp, so the same sweep gives the same bytes."""
    write_png(fig, path, dpi=120)
    plt.close(fig)


def _log_x(ax: plt.Axes) -> None:
    """Log x axis with ticks at 1, 2, 5 x 10^k, labelled in plain numbers."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.StrMethodFormatter("{x:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


# Stable colours (tab10 indices) for the built-in kinds, so a policy looks the same in every
# sweep whatever else it is compared with; fixed:K (greys) and threshold:h (pinks) are shaded by
# their argument, plug-ins take a Dark2 colour from their class name.
_KIND_COLORS = {"mtp1": 0, "dspark": 1, "dspark-async": 2, "goodput": 3, "oracle": 4, "ar": 5}
_BUILT_IN_KINDS = {entry.kind for entry in BUILT_INS}
LINESTYLES = ("-", "--", "-.", ":")  # one per layout, in the config's order
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # one per layout, in the config's order


def display_name(spec: str) -> str:
    """A policy's legend name: the spec of a built-in, the class name of a plug-in."""
    ref = plugin_ref(spec)
    return ref.class_name if ref is not None else spec


def policy_color(spec: str) -> tuple:
    """The policy's colour, the same in every sweep (a plug-in's from its class name)."""
    kind, _, arg = spec.partition(":")
    if spec == BEST_FIXED:
        return (0.0, 0.0, 0.0, 1.0)
    if kind in _KIND_COLORS and not arg:
        return plt.get_cmap("tab10")(_KIND_COLORS[kind])
    if kind in ("fixed", "threshold") and kind in _BUILT_IN_KINDS:
        value = float(arg) / 8 if kind == "fixed" else float(arg)
        cmap = plt.get_cmap("Greys" if kind == "fixed" else "RdPu")
        return cmap(0.35 + 0.6 * min(max(value, 0.0), 1.0))
    digest = hashlib.sha256(display_name(spec).encode()).digest()
    return plt.get_cmap("Dark2")(digest[0] % 8)


def _series(table: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(policy, layout, rows) per policy and layout, in first-appearance order."""
    if "layout" not in table:
        table = table.assign(layout="")
    return [(p, lay, g) for (p, lay), g in table.groupby(["policy", "layout"], sort=False)]


def _label(policy: str, layout: str) -> str:
    return display_name(policy) + (f" | {layout}" if layout else "")


def _spread(front: pd.DataFrame, col: str) -> list[np.ndarray]:
    """Error bars from the mean to the min and max over seeds; clipped at 0 because a mean of
    equal values can land an ulp outside them."""
    mean = front[col].to_numpy()
    return [
        np.maximum(mean - front[f"{col}_min"].to_numpy(), 0.0),
        np.maximum(front[f"{col}_max"].to_numpy() - mean, 0.0),
    ]


def plot_pareto(cfg: SweepConfig, points: pd.DataFrame, result: Analysis, title: str, path: Path):
    """Throughput vs median per-user speed (points, frontier per policy and layout, SLA
    anchors), above the speed gain over the baseline at matched throughput.

    Excluded points (docs/pareto.md) are hollow; each mean point is labelled with its load, or
    with its layout in a layout sweep, whose layouts also differ by marker and line style. With
    several seeds the line is the frontier of the per-load means, its points carry the min-max
    range over seeds as error bars, and the single-seed points are drawn faintly. Legends sit
    beside the axes, off the data. A layout sweep whose policies give no gain over the
    baseline (one policy, or only the baseline's members) shows each layout's gain over its
    first layout instead."""
    fig, (ax, low) = plt.subplots(2, 1, figsize=(11, 8.5), gridspec_kw={"height_ratios": [3, 1.4]})
    order = list(dict.fromkeys(points["layout"]))
    styles = {lay: LINESTYLES[i % 4] for i, lay in enumerate(order)}
    marks = {lay: MARKERS[i % len(MARKERS)] for i, lay in enumerate(order)}
    for policy, layout, p in _series(points):
        color, line, mark = policy_color(policy), styles[layout], marks[layout]
        kept = p["excluded"] == ""
        ax.scatter(p[X][kept], p[Y][kept], s=18, color=color, alpha=0.6, marker=mark)
        ax.scatter(p[X][~kept], p[Y][~kept], s=22, facecolors="none", edgecolors=[color],
                   marker=mark)  # fmt: skip
        f = result.front[(result.front["policy"] == policy) & (result.front["layout"] == layout)]
        ax.plot(f[X], f[Y], line, color=color, label=_label(policy, layout), linewidth=1.8,
                marker=mark, markersize=4)  # fmt: skip
        if "seeds" in f and f["seeds"].max() > 1:
            ax.errorbar(
                f[X], f[Y], fmt="none", ecolor=color, elinewidth=1, capsize=2,
                xerr=_spread(f, X), yerr=_spread(f, Y),
            )  # fmt: skip
    if cfg.baseline == BEST_FIXED:
        _plot_envelope(ax, result.gains, styles)
    _point_labels(ax, result.means, bool(cfg.layouts))
    _log_x(ax)
    if (points["excluded"] != "").any():
        ax.scatter([], [], s=22, facecolors="none", edgecolors="0.3", label="excluded (hollow)")
    _sla_labels(ax, list(cfg.sla_anchors))
    ax.set_xlabel("median per-user speed (tok/s/user, log scale)")
    ax.set_ylabel("output throughput (tok/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    labels = "layout" if cfg.layouts else cfg.load_axis
    ax.legend(fontsize=8, title=f"point labels: {labels}", title_fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # fmt: skip
    gains, baseline = result.gains, display_name(cfg.baseline)
    if len(order) > 1 and gains.dropna(subset=["gain"]).empty:
        gains, baseline = layout_gains(result.front, order[0]), order[0]
    _plot_gains(low, gains, baseline, styles, marks)
    fig.tight_layout()
    save_figure(fig, path)


def layout_gains(front: pd.DataFrame, baseline: str, levels: int = 6) -> pd.DataFrame:
    """Per policy, each layout's speed gain over layout `baseline`'s at `levels` throughputs
    both frontiers cover (none where they share no throughput)."""
    rows = []
    for policy, f in front.groupby("policy", sort=False):
        base = f[f["layout"] == baseline]
        for layout, mine in f[f["layout"] != baseline].groupby("layout", sort=False):
            lo = max(base[Y].min(), mine[Y].min())
            hi = min(base[Y].max(), mine[Y].max())
            if hi < lo:
                continue
            for level in np.linspace(lo, hi, levels) if hi > lo else [lo]:
                ours, theirs = (speed_at_throughput(x, policy, level) for x in (mine, base))
                rows.append({"layout": layout, "policy": policy, "throughput_tok_s": level,
                             "gain": ours / theirs - 1})  # fmt: skip
    return pd.DataFrame(rows, columns=["layout", "policy", "throughput_tok_s", "gain"])


def _plot_envelope(ax: plt.Axes, gains: pd.DataFrame, styles: dict) -> None:
    """The best-fixed baseline's own line: the envelope of the fixed:K frontiers at the matched
    throughputs the gains are read at (mean over seeds), per layout."""
    table = gains if "layout" in gains else gains.assign(layout="")
    for layout, g in table.dropna(subset=["baseline_tps_p50"]).groupby("layout", sort=False):
        level = g.drop_duplicates("throughput_tok_s").sort_values("throughput_tok_s")
        ax.plot(
            level["baseline_tps_p50"], level["throughput_tok_s"], styles.get(layout, "-"),
            color=policy_color(BEST_FIXED), linewidth=3, alpha=0.35,
            label=_label(BEST_FIXED, layout) + " (envelope)",
        )  # fmt: skip


def _point_labels(ax: plt.Axes, means: pd.DataFrame, by_layout: bool) -> None:
    """Each mean point's load beside it, in its policy's colour; in a layout sweep, the layout
    beside each series' highest-throughput point instead."""
    for policy, layout, m in _series(means):
        if by_layout:
            m = m.dropna(subset=[X, Y]).nlargest(1, Y)
        for _, row in m.iterrows():
            if not (np.isnan(row[X]) or np.isnan(row[Y])):
                text = layout if by_layout else f"{row['load']:g}"
                ax.annotate(
                    text, (row[X], row[Y]), xytext=(3, 3), textcoords="offset points",
                    fontsize=6, color=policy_color(policy), alpha=0.9,
                )  # fmt: skip


def _sla_labels(ax: plt.Axes, anchors: list[float]) -> None:
    """A dotted line per anchor; a label that would touch the previous one is set lower."""
    for anchor in anchors:
        ax.axvline(anchor, color="0.4", linestyle=":", linewidth=1)
    lo, hi = np.log(ax.get_xlim())
    previous, level = -1.0, 0
    for anchor in sorted(anchors):
        at = (np.log(anchor) - lo) / (hi - lo)
        level = (level + 1) % 4 if at - previous < 0.04 else 0
        previous = at
        ax.annotate(
            f"SLA {anchor:g}", (anchor, 1.0 - 0.17 * level), xycoords=("data", "axes fraction"),
            rotation=90, va="top", ha="right", fontsize=8, color="0.3",
        )  # fmt: skip


def _plot_gains(
    ax: plt.Axes, gains: pd.DataFrame, baseline: str, styles: dict, marks: dict | None = None
) -> None:
    """Speed gain over the baseline against the matched throughput, per policy and layout."""
    ax.axhline(0.0, color="0.2", linewidth=1)
    for policy, layout, g in _series(gains.dropna(subset=["gain"])):
        mark = (marks or {}).get(layout, "o")
        style = dict(color=policy_color(policy), marker=mark, markersize=3)
        ax.plot(g["throughput_tok_s"], 100 * g["gain"], styles.get(layout, "-"),
                label=_label(policy, layout), **style)  # fmt: skip
    if gains.dropna(subset=["gain"]).empty:
        ax.text(0.5, 0.5, f"no throughput range shared with {baseline}", ha="center",
                transform=ax.transAxes, fontsize=9, color="0.3")  # fmt: skip
    else:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.set_xlabel("matched output throughput (tok/s)")
    ax.set_ylabel(f"speed gain over\n{baseline} (%)")
    ax.grid(True, alpha=0.3)


def plot_load(points: pd.DataFrame, title: str, path: Path) -> None:
    """Throughput and mean verify budget per request against mean concurrency (means over seeds,
    with the throughput's min-max range over seeds shaded)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10.5, 7), sharex=True)
    layouts = list(dict.fromkeys(points["layout"])) if "layout" in points else [""]
    for policy, layout, p in _series(points):
        p, color = p.sort_values("mean_batch_size"), policy_color(policy)
        if "seeds" in p and p["seeds"].max() > 1:
            top.fill_between(
                p["mean_batch_size"], p[f"{Y}_min"], p[f"{Y}_max"], color=color, alpha=0.2
            )
        line = LINESTYLES[layouts.index(layout) % 4]
        mark = MARKERS[layouts.index(layout) % len(MARKERS)]
        style = dict(color=color, marker=mark, markersize=3, label=_label(policy, layout))
        top.plot(p["mean_batch_size"], p[Y], line, **style)
        bottom.plot(p["mean_batch_size"], p["mean_verify_budget"], line, **style)
    top.set_ylabel("output throughput (tok/s)")
    bottom.set_ylabel("verify budget (tok/request/round)")
    bottom.set_xlabel("concurrency: mean running requests per step")
    _log_x(bottom)
    top.set_title(title)
    for ax in (top, bottom):
        ax.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    save_figure(fig, path)
