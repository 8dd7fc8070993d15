"""`dsim profile show`: the curve as a table and a two-panel plot, with the knee marked.

The knee is where a context's curve leaves the flat, weight-read-bound region: the first
measured B whose latency exceeds KNEE_RATIO times the light-load latency (the latency at the
smallest measured B). Below it extra verified tokens are nearly free; above it they cost
(compute-bound, or at long contexts bound by reading every sequence's KV cache). A threshold
on measured points, unlike a fit, survives jagged real curves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from dsim.fileio import write_with
from dsim.hardware.latency import LatencyModel, engine_label, profile_metadata, read_profile

KNEE_RATIO = 1.2


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


def _label(key: Any) -> str:
    return f"ctx {key[0]} R {key[1]}" if isinstance(key, tuple) else f"ctx {key}"


def render_table(path: Path, df: pd.DataFrame, meta: dict, model: LatencyModel) -> Table:
    """Latency (ms) per (phase, batch tokens, sequences), one column per context; the model's
    reading of the profile and the knees in the caption."""
    kind = "ESTIMATE" if meta.get("estimate") else "measured"
    title = f"{path.name} ({kind}: {meta.get('device') or meta.get('gpu', '?')}, "
    title += f"{meta.get('model', '?')}, {meta.get('dtype', '?')})"
    table = Table(title=title)
    index = ["phase", "batch_tokens"] + (["num_seqs"] if "num_seqs" in df else [])
    for col in ("phase", "batch_tokens", "num_seqs")[: len(index)]:
        table.add_column(col, justify="right")
    wide = df.pivot_table(index=index, columns="context_len", values="latency_ms", sort=True)
    for ctx in wide.columns:
        table.add_column(f"ctx {int(ctx)} ms", justify="right")
    for key, row in wide.iterrows():
        cells = [str(key[0]), *(str(int(k)) for k in key[1:])]
        table.add_row(*cells, *("" if np.isnan(v) else f"{v:.3f}" for v in row))
    per_curve = curves(df, model.verify.r_dependent)
    knees = {key: knee(c["batch_tokens"], c["latency_ms"]) for key, c in per_curve.items()}
    table.caption = (
        f"model: {model.describe()}\nknee (latency > {KNEE_RATIO}x light load) at B = "
        + ", ".join(f"{k if k is not None else 'none'} ({_label(key)})" for key, k in knees.items())
    )
    return table


def plot(per_ctx: dict[Any, pd.DataFrame], title: str, out: Path) -> None:
    """SPS(B) and tokens/s = B * SPS(B) against B (log x), one line per curve, knees marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_sps, ax_tok) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ctx, c in per_ctx.items():
        line = ax_sps.plot(c["batch_tokens"], c["sps"], marker=".", label=_label(ctx))[0]
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
    df = read_profile(path)
    model = LatencyModel(df, name=path.stem, engine=engine_label(path))
    meta = profile_metadata(path)
    Console().print(render_table(path, df, meta, model))
    png = Path(out) if out is not None else path.with_suffix(".png")
    kind = "estimate" if meta.get("estimate") else "measured"
    plot(curves(df, model.verify.r_dependent), f"{path.stem} ({kind})", png)
    return png
