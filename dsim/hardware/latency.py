"""Step latency of the target from a hardware load profile (docs/design.md, The step-time model;
Trace and profile formats).

The profile gives median latency at measured (batch_tokens, context_len) points, where
context_len is the KV context per sequence. The model interpolates linearly in batch tokens
within each measured context, then linearly across contexts, and extrapolates linearly past
the measured range (clamped to stay positive), so real curves keep their cliffs.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dsim.errors import InputError
from dsim.fileio import write_json, write_with
from dsim.inputs import read_json_object
from dsim.tables import numeric_column, read_table, require_columns

MAX_BATCH_TOKENS = 1_000_000  # the model tabulates every batch size up to twice the largest
REQUIRED = ("batch_tokens", "context_len", "latency_ms")
OPTIONAL_NUMERIC = ("num_seqs", "latency_ms_p10", "latency_ms_p90")


def read_profile(path: str | Path) -> pd.DataFrame:
    """Load and validate a profile CSV; bad cells raise InputError naming the row."""
    df = read_table(path)
    require_columns(df, path, REQUIRED)
    out = pd.DataFrame(
        {
            "batch_tokens": numeric_column(
                df, path, "batch_tokens", positive=True, at_most=MAX_BATCH_TOKENS
            ),
            "context_len": numeric_column(df, path, "context_len", nonnegative=True),
            "latency_ms": numeric_column(df, path, "latency_ms", positive=True),
        }
    )
    for col in OPTIONAL_NUMERIC:
        if col in df.columns:
            out[col] = numeric_column(df, path, col, positive=True)
    for col in df.columns.difference(out.columns):
        out[col] = df[col]
    dup = out.duplicated(["batch_tokens", "context_len"]).to_numpy()
    if dup.any():
        raise InputError(path, int(np.argmax(dup)) + 1, "duplicate (batch_tokens, context_len)")
    return out


def profile_metadata(path: str | Path) -> dict[str, Any]:
    """The JSON sidecar (NAME.json beside NAME.csv), or {} when there is none."""
    side = Path(path).with_suffix(".json")
    if not side.exists():
        return {}
    return read_json_object(side, "profile sidecar")


def write_profile(df: pd.DataFrame, path: str | Path, meta: dict[str, Any]) -> None:
    """Write the CSV and its JSON sidecar atomically."""
    path = Path(path)
    write_with(path, lambda tmp: df.to_csv(tmp, index=False, float_format="%.6g"))
    write_json(path.with_suffix(".json"), meta)


def _interp_linear(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """np.interp with linear extrapolation from the end segments."""
    if len(xs) == 1:
        return np.full_like(x, ys[0], dtype=np.float64)
    y = np.interp(x, xs, ys)
    lo_slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
    hi_slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    y = np.where(x < xs[0], ys[0] + lo_slope * (x - xs[0]), y)
    return np.where(x > xs[-1], ys[-1] + hi_slope * (x - xs[-1]), y)


class LatencyModel:
    """Target step latency in seconds as a function of batch tokens and context per sequence.

    Curves are tabulated once at every integer batch size up to twice the largest measured
    one, so the simulator's per-step lookups are array indexing, not interpolation.
    """

    def __init__(self, df: pd.DataFrame, name: str = "profile") -> None:
        self.name = name
        self.contexts = np.sort(df["context_len"].unique()).astype(np.float64)
        self._ctx_list = self.contexts.tolist()
        self._curves = []
        for ctx in self.contexts:
            part = df[df["context_len"] == ctx].sort_values("batch_tokens")
            xs = part["batch_tokens"].to_numpy(np.float64)
            ys = part["latency_ms"].to_numpy(np.float64) / 1e3
            self._curves.append((xs, ys))
        self._floor = float(df["latency_ms"].min()) / 1e3 * 0.05
        self._bmax = int(2 * df["batch_tokens"].max())
        grid = np.arange(self._bmax + 1, dtype=np.float64)
        self._table = np.stack([_interp_linear(grid, xs, ys) for xs, ys in self._curves])

    @classmethod
    def from_csv(cls, path: str | Path) -> LatencyModel:
        return cls(read_profile(path), name=Path(path).stem)

    def _bracket(self, context_len: float) -> tuple[int, int, float]:
        """Rows of the two contexts around `context_len` and the blend weight (may extrapolate)."""
        ctxs = self._ctx_list
        if len(ctxs) == 1:
            return 0, 0, 0.0
        i = min(max(bisect.bisect_left(ctxs, context_len), 1), len(ctxs) - 1)
        return i - 1, i, (context_len - ctxs[i - 1]) / (ctxs[i] - ctxs[i - 1])

    def latency(self, batch_tokens: Any, context_len: float = 0.0) -> np.ndarray | float:
        """Seconds for one target step; `batch_tokens` may be a scalar or an array."""
        lo, hi, w = self._bracket(context_len)
        if isinstance(batch_tokens, int | np.integer) and 0 <= batch_tokens <= self._bmax:
            y0, y1 = self._table[lo, batch_tokens], self._table[hi, batch_tokens]
            return max(float(y0 + w * (y1 - y0)), self._floor)
        b = np.asarray(batch_tokens)
        if b.dtype.kind in "iu" and b.size and b.max() <= self._bmax and b.min() >= 0:
            y0, y1 = self._table[lo, b], self._table[hi, b]
        else:
            b = b.astype(np.float64)
            y0, y1 = _interp_linear(b, *self._curves[lo]), _interp_linear(b, *self._curves[hi])
        y = np.maximum(y0 + w * (y1 - y0), self._floor)
        return float(y) if y.ndim == 0 else y
