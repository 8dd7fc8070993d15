"""Reliability diagrams of prefix survival, one panel per draft position, raw vs after STS."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # the object API: no pyplot state, no GUI backend

from dsim.acceptance.calibration import (
    N_BINS,
    apply_temperatures,
    ece,
    prefix_labels,
    reliability_bins,
)
from dsim.fileio import write_png


def plot_reliability(
    conf: np.ndarray, accepted: np.ndarray, temperatures: np.ndarray, path: str | Path
) -> None:
    """Predicted vs observed prefix survival per position; bin counts as bars behind."""
    gamma = conf.shape[1]
    labels = prefix_labels(accepted, gamma)
    series = (
        ("raw", np.cumprod(conf, axis=1), "tab:red", "o"),
        ("STS", np.cumprod(apply_temperatures(conf, temperatures), axis=1), "tab:blue", "s"),
    )
    ncols = min(gamma, 4)
    nrows = math.ceil(gamma / ncols)
    fig = Figure(figsize=(3.4 * ncols, 3.3 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    for k, ax in enumerate(axes.flat):
        if k >= gamma:
            ax.axis("off")
            continue
        counts_ax = ax.twinx()
        ax.set_zorder(counts_ax.get_zorder() + 1)  # curves in front of the histogram
        ax.patch.set_visible(False)
        ece_text = []
        for name, survival, color, marker in series:
            mean_pred, observed, count = reliability_bins(survival[:, k], labels[:, k])
            seen = count > 0
            ax.plot(mean_pred[seen], observed[seen], marker=marker, ms=3, color=color, label=name)
            filled = name == "STS"
            counts_ax.stairs(count, edges, color=color, alpha=0.25 if filled else 0.6, fill=filled)
            ece_text.append(f"{name} {ece(survival[:, k], labels[:, k]):.3f}")
        ax.plot([0, 1], [0, 1], ls=":", color="0.4", lw=1)
        ax.set(xlim=(0, 1), ylim=(0, 1), title=f"position {k + 1}")
        ax.text(0.03, 0.97, "ECE " + ", ".join(ece_text), va="top", fontsize=7)
        counts_ax.set_yscale("symlog", linthresh=10)
        if k % ncols == ncols - 1 or k == gamma - 1:
            counts_ax.set_ylabel("rounds per bin", fontsize=8)
        if k % ncols == 0:
            ax.set_ylabel("observed prefix survival")
        if k >= gamma - ncols:
            ax.set_xlabel("predicted prefix survival")
        if k == 0:
            ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    write_png(fig, path, dpi=110)
