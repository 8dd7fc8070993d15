"""`dsim profile show`: the curve as a table and a two-panel plot, with the knee marked.

The knee is where a context's curve leaves the flat, weight-read-bound region: the first
measured B whose latency exceeds KNEE_RATIO times the light-load latency (the latency at the
smallest measured B). Below it extra verified tokens are nearly free; above it they cost
(compute-bound, or at long contexts bound by reading every sequence's KV cache). A threshold
on measured points, unlike a fit, survives jagged real curves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from dsim.fileio import write_with
from dsim.hardware.latency import profile_metadata, read_profile

KNEE_RATIO = 1.2


def knee(batch_tokens: np.ndarray, latency: np.ndarray, ratio: float = KNEE_RATIO) -> int | None:
    """First B (sorted ascending) with latency > ratio * latency at the smallest B; None if the
    curve never leaves the flat region."""
    order = np.argsort(batch_tokens)
    b, lat = np.asarray(batch_tokens)[order], np.asarray(latency)[order]
    above = np.flatnonzero(lat > ratio * lat[0])
    return int(b[above[0]]) if above.size else None


def curves(df: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Per context: batch_tokens, latency_ms, sps and tokens_per_s, sorted by B."""
    out = {}
    for ctx, part in df.groupby("context_len", sort=True):
        part = part.sort_values("batch_tokens")
        sps = 1e3 / part["latency_ms"].to_numpy()
        out[int(ctx)] = pd.DataFrame(
            {
                "batch_tokens": part["batch_tokens"].to_numpy(),
                "latency_ms": part["latency_ms"].to_numpy(),
                "sps": sps,
                "tokens_per_s": part["batch_tokens"].to_numpy() * sps,
            }
        )
    return out


def render_table(path: Path, per_ctx: dict[int, pd.DataFrame], meta: dict) -> Table:
    """Latency (ms) per batch-token count, one column per context; knees in the caption."""
    kind = "ESTIMATE" if meta.get("estimate") else "measured"
    title = f"{path.name} ({kind}: {meta.get('device') or meta.get('gpu', '?')}, "
    title += f"{meta.get('model', '?')}, {meta.get('dtype', '?')})"
    table = Table(title=title)
    table.add_column("batch_tokens", justify="right")
    for ctx in per_ctx:
        table.add_column(f"ctx {ctx} ms", justify="right")
    merged = pd.concat(
        [c.set_index("batch_tokens")["latency_ms"].rename(ctx) for ctx, c in per_ctx.items()],
        axis=1,
    ).sort_index()
    for b, row in merged.iterrows():
        table.add_row(str(int(b)), *("" if np.isnan(v) else f"{v:.3f}" for v in row))
    knees = {ctx: knee(c["batch_tokens"], c["latency_ms"]) for ctx, c in per_ctx.items()}
    table.caption = f"knee (latency > {KNEE_RATIO}x light load) at B = " + ", ".join(
        f"{k if k is not None else 'none'} (ctx {ctx})" for ctx, k in knees.items()
    )
    return table


def plot(per_ctx: dict[int, pd.DataFrame], title: str, out: Path) -> None:
    """SPS(B) and tokens/s = B * SPS(B) against B (log x), one line per context, knees marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_sps, ax_tok) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ctx, c in per_ctx.items():
        line = ax_sps.plot(c["batch_tokens"], c["sps"], marker=".", label=f"ctx {ctx}")[0]
        ax_tok.plot(c["batch_tokens"], c["tokens_per_s"], marker=".", color=line.get_color())
        k = knee(c["batch_tokens"], c["latency_ms"])
        if k is not None:
            at = c["batch_tokens"] == k
            ax_sps.plot(k, c["sps"][at].iloc[0], "x", ms=10, mew=2, color=line.get_color())
            ax_tok.plot(k, c["tokens_per_s"][at].iloc[0], "x", ms=10, mew=2, color=line.get_color())
    for ax, label in ((ax_sps, "steps per second SPS(B)"), (ax_tok, "tokens/s = B * SPS(B)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch tokens B")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_sps.legend(title=f"x = knee (> {KNEE_RATIO}x light-load latency)", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    write_with(out, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


def show_profile(path: str | Path, out: str | Path | None = None) -> Path:
    """Print the profile table and write the PNG (default: beside the CSV); returns the PNG."""
    path = Path(path)
    per_ctx = curves(read_profile(path))
    meta = profile_metadata(path)
    Console().print(render_table(path, per_ctx, meta))
    png = Path(out) if out is not None else path.with_suffix(".png")
    kind = "estimate" if meta.get("estimate") else "measured"
    plot(per_ctx, f"{path.stem} ({kind})", png)
    return png
