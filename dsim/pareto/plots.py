"""The two pictures of a sweep: the Pareto frontiers and the load curves."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dsim.fileio import write_with  # noqa: E402
from dsim.pareto.frontier import X, Y  # noqa: E402


def _save(fig: plt.Figure, path: Path) -> None:
    """PNG without a timestamp or version stamp, so the same sweep gives the same bytes."""
    stamp = {"Software": None}
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120, metadata=stamp))
    plt.close(fig)


def _log_x(ax: plt.Axes) -> None:
    """Log x axis with ticks at 1, 2, 5 x 10^k, labelled in plain numbers."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.StrMethodFormatter("{x:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def _colors(policies: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {p: cmap(i % 10) for i, p in enumerate(policies)}


def _spread(front: pd.DataFrame, col: str) -> list[np.ndarray]:
    """Error bars from the mean to the min and max over seeds; clipped at 0 because a mean of
    equal values can land an ulp outside them."""
    mean = front[col].to_numpy()
    return [
        np.maximum(mean - front[f"{col}_min"].to_numpy(), 0.0),
        np.maximum(front[f"{col}_max"].to_numpy() - mean, 0.0),
    ]


def plot_pareto(
    points: pd.DataFrame, front: pd.DataFrame, anchors: list[float], title: str, path: Path
) -> None:
    """Throughput vs median per-user speed: points, frontier line per policy, SLA anchors.

    With several seeds the line is the frontier of the per-load means, its points carry the
    min-max range over seeds as error bars, and the single-seed points are drawn faintly."""
    policies = list(points["policy"].unique())
    color = _colors(policies)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for policy in policies:
        p, f = points[points["policy"] == policy], front[front["policy"] == policy]
        ax.scatter(p[X], p[Y], s=18, color=color[policy], alpha=0.6)
        ax.plot(f[X], f[Y], "-", color=color[policy], label=policy, linewidth=1.8)
        if "seeds" in f and f["seeds"].max() > 1:
            ax.errorbar(
                f[X], f[Y], fmt="none", ecolor=color[policy], elinewidth=1, capsize=2,
                xerr=_spread(f, X), yerr=_spread(f, Y),
            )  # fmt: skip
    for anchor in anchors:
        ax.axvline(anchor, color="0.4", linestyle=":", linewidth=1)
        ax.annotate(
            f"SLA {anchor:g}", (anchor, 1.0), xycoords=("data", "axes fraction"),
            rotation=90, va="top", ha="right", fontsize=8, color="0.3",
        )  # fmt: skip
    _log_x(ax)
    ax.set_xlabel("median per-user speed (tok/s/user, log scale)")
    ax.set_ylabel("output throughput (tok/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    _save(fig, path)


def plot_load(points: pd.DataFrame, title: str, path: Path) -> None:
    """Throughput and mean verify budget per request against mean concurrency (means over seeds,
    with the throughput's min-max range over seeds shaded)."""
    policies = list(points["policy"].unique())
    color = _colors(policies)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for policy in policies:
        p = points[points["policy"] == policy].sort_values("mean_batch_size")
        if "seeds" in p and p["seeds"].max() > 1:
            top.fill_between(
                p["mean_batch_size"], p[f"{Y}_min"], p[f"{Y}_max"], color=color[policy], alpha=0.2
            )
        style = dict(color=color[policy], marker="o", markersize=3, label=policy)
        top.plot(p["mean_batch_size"], p[Y], **style)
        bottom.plot(p["mean_batch_size"], p["mean_verify_budget"], **style)
    top.set_ylabel("output throughput (tok/s)")
    bottom.set_ylabel("verify budget (tok/request/round)")
    bottom.set_xlabel("concurrency: mean running requests per step")
    _log_x(bottom)
    top.set_title(title)
    for ax in (top, bottom):
        ax.grid(True, which="both", alpha=0.3)
    top.legend()
    fig.tight_layout()
    _save(fig, path)
