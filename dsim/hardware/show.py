"""`dsim profile show`: the profile as tables and a two-panel plot, with the knees marked.

The knee is where a curve leaves the flat, weight-read-bound region: the first measured B
whose latency exceeds KNEE_RATIO times the light-load latency (the latency at the smallest
measured B). Below it extra verified tokens are nearly free; above it they cost
(compute-bound, or at long contexts bound by reading every sequence's KV cache). A threshold
on measured points, unlike a fit, survives jagged real curves.

An estimate holds hundreds of rows (every context x sequences x tokens per sequence), so the
output is shaped to stay readable in an 80-column terminal and one figure: one latency table
per phase with a column per context, the knees as a small sequences x context table, and
plots that draw at most PLOT_CONTEXTS contexts (line style) with the sequence count as a
colour scale instead of a legend entry per curve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dsim.errors import InputError
from dsim.fileio import check_output_file, write_png
from dsim.hardware.latency import (
    LatencyModel,
    engine_label,
    profile_metadata,
    read_profile,
    staircase,
)
from dsim.hardware.show_engine import engine_parts
from dsim.report import figure

KNEE_RATIO = 1.2
PLOT_CONTEXTS = 3  # the shortest, a middle and the longest context
_STYLES = ("-", "--", ":")


def knee(batch_tokens: np.ndarray, latency: np.ndarray, ratio: float = KNEE_RATIO) -> int | None:
    """First B (sorted ascending) with latency > ratio * latency at the smallest B; None if the
    curve never leaves the flat region."""
    order = np.argsort(batch_tokens)
    b, lat = np.asarray(batch_tokens)[order], np.asarray(latency)[order]
    above = np.flatnonzero(lat > ratio * lat[0])
    return int(b[above[0]]) if above.size else None


def curves(df: pd.DataFrame, by_seqs: bool = False) -> dict[Any, pd.DataFrame]:
    """Per context (per (context, R) with `by_seqs`) of the verify rows: batch_tokens,
    latency_ms, sps and tokens_per_s, sorted by B."""
    if "phase" in df:
        df = df[df["phase"] == "verify"]
    keys = ["context_len", "num_seqs"] if by_seqs else ["context_len"]
    out = {}
    for key, part in df.groupby(keys, sort=True):
        part = part.sort_values("batch_tokens")
        sps = 1e3 / part["latency_ms"].to_numpy()
        name = tuple(int(k) for k in key) if by_seqs else int(key[0])
        out[name] = pd.DataFrame(
            {
                "batch_tokens": part["batch_tokens"].to_numpy(),
                "latency_ms": part["latency_ms"].to_numpy(),
                "sps": sps,
                "tokens_per_s": part["batch_tokens"].to_numpy() * sps,
            }
        )
    return out


def _compact(heading: str) -> Group:
    """A heading line over a table without borders or outer padding (a column per context fits
    80 columns; a heading of its own does not wrap to a narrow table's width)."""
    table = Table(box=None, padding=(0, 0, 0, 1), pad_edge=False, header_style="bold")
    return Group(Text(heading, style="italic"), table)


def latency_table(df: pd.DataFrame, phase: str) -> Group:
    """Latency (ms) of one phase's rows: a row per (B, R), a column per context."""
    index = ["batch_tokens"] + (["num_seqs"] if "num_seqs" in df else [])
    shown = _compact(f"{phase} step latency (ms) by context length")
    table = shown.renderables[1]
    for name in ("B", "R")[: len(index)]:
        table.add_column(name, justify="right", style="bold")
    wide = df.pivot_table(index=index, columns="context_len", values="latency_ms", sort=True)
    for ctx in wide.columns:
        table.add_column(str(int(ctx)), justify="right")
    for key, row in wide.iterrows():
        keys = key if isinstance(key, tuple) else (key,)
        table.add_row(
            *(str(int(k)) for k in keys), *("" if np.isnan(v) else figure(v) for v in row)
        )
    return shown


def knee_table(per_curve: dict[Any, pd.DataFrame]) -> Group:
    """The knee B of every verify curve: a row per sequence count R (one row when the profile
    does not depend on R), a column per context; '-' where the curve stays flat."""
    knees = {key: knee(c["batch_tokens"], c["latency_ms"]) for key, c in per_curve.items()}
    heading = f"knee B by context length: the first B whose latency > {KNEE_RATIO}x the light-load"
    shown = _compact(f"{heading} latency of its curve (-: none)")
    table = shown.renderables[1]
    by_seqs = any(isinstance(k, tuple) for k in knees)
    contexts = sorted({k[0] if by_seqs else k for k in knees})
    rows = sorted({k[1] for k in knees}) if by_seqs else ["any"]
    table.add_column("R", justify="right", style="bold")
    for ctx in contexts:
        table.add_column(str(ctx), justify="right")
    for r in rows:
        cells = [knees.get((ctx, r) if by_seqs else ctx, "") for ctx in contexts]
        table.add_row(str(r), *("-" if k is None else str(k) for k in cells))
    return shown


def render_table(path: Path, df: pd.DataFrame, meta: dict, model: LatencyModel) -> Group:
    """What `dsim profile show` prints: a header naming the profile and how the step-time
    model reads it, a latency table per phase, the knees, and for an estimate the engine's
    step and round parts and priors (`show_engine`)."""
    kind = "ESTIMATE" if meta.get("estimate") else "measured"
    where = meta.get("device") or meta.get("gpu", "?")
    dtype = meta.get("dtype") or meta.get("parallel", {}).get("dtype", "?")
    head = f"{path.name} ({kind}: {where}, {meta.get('model', '?')}, {dtype})"
    phases = sorted(df["phase"].unique(), reverse=True) if "phase" in df else ["verify"]
    tables = [latency_table(df[df["phase"] == p] if "phase" in df else df, p) for p in phases]
    knees = knee_table(curves(df, model.verify.r_dependent))
    gap = Text("")
    parts = [Text(head, style="bold"), Text(f"model: {model.describe()}")]
    shown = (*tables, knees, *engine_parts(meta, model))
    return Group(*parts, *(x for t in shown for x in (gap, t)))


def _shown_contexts(contexts: list[int]) -> list[int]:
    """Up to PLOT_CONTEXTS contexts spread over the measured ones (ends included)."""
    if len(contexts) <= PLOT_CONTEXTS:
        return contexts
    picks = np.linspace(0, len(contexts) - 1, PLOT_CONTEXTS).round().astype(int)
    return [contexts[i] for i in picks]


def plot(per_curve: dict[Any, pd.DataFrame], title: str, out: Path) -> None:
    """Write `profile_figure` as a PNG."""
    import matplotlib.pyplot as plt

    fig = profile_figure(per_curve, title)
    write_png(fig, out, dpi=120)
    plt.close(fig)


def profile_figure(per_curve: dict[Any, pd.DataFrame], title: str):
    """SPS(B) and tokens/s = B * SPS(B) against B (log x), knees marked: one line style per
    shown context, one colour per sequence count R (a colour bar) or per context."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.lines import Line2D

    by_seqs = any(isinstance(k, tuple) for k in per_curve)
    contexts = _shown_contexts(sorted({k[0] if by_seqs else k for k in per_curve}))
    seqs = sorted({k[1] for k in per_curve}) if by_seqs else []
    cmap = plt.get_cmap("viridis")
    norm = LogNorm(min(seqs), max(seqs)) if len(seqs) > 1 else None
    fig, (ax_sps, ax_tok) = plt.subplots(1, 2, figsize=(12, 4.6), layout="constrained")
    handles = []
    for i, ctx in enumerate(contexts):
        style = _STYLES[i] if by_seqs else "-"
        colour = None if by_seqs else f"C{i}"
        handles.append(Line2D([], [], color=colour or "k", ls=style, label=f"context {ctx}"))
        for key, c in per_curve.items():
            if (key[0] if by_seqs else key) != ctx:
                continue
            if by_seqs:
                colour = cmap(norm(key[1])) if norm is not None else "C0"
            _draw(ax_sps, ax_tok, c, style, colour)
    handles.append(Line2D([], [], color="k", marker="x", ls="", mew=2, label="knee"))
    for ax, label in ((ax_sps, "steps per second SPS(B)"), (ax_tok, "tokens/s = B * SPS(B)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch tokens B")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_sps.legend(handles=handles, fontsize=8, loc="upper right")
    if norm is not None:
        bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax_tok)
        bar.set_label("sequences in the step R")
    fig.suptitle(title)
    return fig


def _draw(ax_sps, ax_tok, c: pd.DataFrame, style: str, colour) -> None:
    """One curve on both panels, its knee (if any) marked with an x."""
    b = c["batch_tokens"]
    ax_sps.plot(b, c["sps"], ls=style, color=colour, lw=1.2)
    ax_tok.plot(b, c["tokens_per_s"], ls=style, color=colour, lw=1.2)
    k = knee(b, c["latency_ms"])
    if k is not None:
        at = b == k
        for ax, y in ((ax_sps, c["sps"]), (ax_tok, c["tokens_per_s"])):
            ax.plot(k, y[at].iloc[0], "x", ms=7, mew=1.5, color=colour)


def show_profile(path: str | Path, out: str | Path | None = None, force: bool = False) -> Path:
    """Print the profile tables and write the PNG (default: beside the CSV; a PNG dsim did not
    write is replaced only with `force`); returns the PNG."""
    path = Path(path)
    df, meta = read_profile(path), profile_metadata(path)
    model = LatencyModel(df, path.stem, engine_label(meta), staircase(meta, path))
    png = Path(out) if out is not None else path.with_suffix(".png")
    if png.suffix.lower() != ".png":
        raise InputError(png, None, "--out names the PNG it writes: end it in .png")
    check_output_file(png, force, reads=(path,))
    Console().print(render_table(path, df, meta, model))
    kind = "estimate" if meta.get("estimate") else "measured"
    plot(curves(df, model.verify.r_dependent), f"{path.stem} ({kind})", png)
    return png
