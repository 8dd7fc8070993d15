"""plan.png: per tier, each configuration's served rate per GPU against its GPUs (colour: its
policy, as in sweeps; marker: its layout; size: its TP), the winner ringed, legends outside
the data."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.ticker as ticker
import pandas as pd
from matplotlib.lines import Line2D

from dsim.pareto.plots import MARKERS, display_name, policy_color, save_figure
from dsim.plan.answer import winner


def plot_plan(table: pd.DataFrame, title: str, has_target: bool, path: Path) -> None:
    tiers = list(dict.fromkeys(table["tier"]))
    fig, axes = plt.subplots(1, len(tiers), figsize=(4.2 * len(tiers) + 2.6, 4.4), squeeze=False)
    layouts = list(dict.fromkeys(table["layout"]))
    marker = {lay: MARKERS[i % len(MARKERS)] for i, lay in enumerate(layouts)}
    for ax, tier in zip(axes[0], tiers, strict=True):
        rows = table[(table["tier"] == tier) & table["met"]]
        for _, r in rows.iterrows():
            ax.scatter(r["gpus"], r["rate_per_gpu"], color=policy_color(r["policy"]),
                       marker=marker[r["layout"]], s=18 + 10 * r["tp"], alpha=0.8)  # fmt: skip
        best = winner(table[table["tier"] == tier], 1.0 if has_target else None)
        if best is not None:
            ax.scatter(best["gpus"], best["rate_per_gpu"], s=260, facecolors="none",
                       edgecolors="black", linewidths=1.5)  # fmt: skip
        if rows.empty:
            ax.text(0.5, 0.5, "no configuration meets this tier", ha="center",
                    transform=ax.transAxes, fontsize=9, color="0.3")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ticker.StrMethodFormatter("{x:g}"))
        ax.set_title(f"tier {tier}", fontsize=10)
        ax.set_xlabel("GPUs per configuration")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("served rate per GPU (req/s/GPU)")
    policies = list(dict.fromkeys(table["policy"]))
    handles = [Line2D([], [], color=policy_color(p), marker="o", linestyle="",
                      label=display_name(p)) for p in policies]  # fmt: skip
    handles += [Line2D([], [], color="0.4", marker=marker[lay], linestyle="", label=lay)
                for lay in layouts]  # fmt: skip
    handles.append(Line2D([], [], marker="o", markersize=12, markerfacecolor="none",
                          markeredgecolor="black", linestyle="", label="winner"))  # fmt: skip
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1 - 2.4 / fig.get_size_inches()[0], 1))
    save_figure(fig, path)
