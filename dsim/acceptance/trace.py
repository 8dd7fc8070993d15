"""The acceptance-trace file format: NAME.parquet (one row per drafted round) + NAME.json.

Reading and writing share one validator, so a file that `write_acceptance_trace` accepts is
exactly a file that `read_acceptance_trace` accepts. The format is documented in
docs/acceptance-trace.md.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dsim.errors import InputError
from dsim.fileio import sidecar_of, write_json, write_parquet, write_with_sidecar
from dsim.inputs import read_json_object
from dsim.tables import numeric_column, read_table, require_columns

BASE_COLUMNS = ("seq_id", "round", "domain", "gamma", "accepted")
META_KEYS = ("target", "drafter", "dataset", "temperature", "date", "command", "gamma")


def conf_columns(gamma: int) -> list[str]:
    return [f"conf_{k}" for k in range(1, gamma + 1)]


def tv_columns(gamma: int) -> list[str]:
    return [f"tv_{k}" for k in range(1, gamma + 1)]


sidecar_path = sidecar_of  # NAME.json beside NAME.parquet


def trace_gamma(df: pd.DataFrame) -> int:
    """The draft block length of a validated trace."""
    return int(df["gamma"].iloc[0])


def read_acceptance_trace(path: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Load and validate a trace and its sidecar; rows come back sorted by (seq_id, round)."""
    df = _validate_rows(read_table(path), path)
    meta = read_trace_metadata(path)
    _validate_meta(meta, sidecar_path(path), trace_gamma(df))
    return df, meta


def write_acceptance_trace(df: pd.DataFrame, path: str | Path, meta: dict[str, Any]) -> None:
    """Validate, then write the parquet and its sidecar; neither appears unless both are whole.

    `meta` must name target, drafter, dataset, temperature and command (values may be null
    where they do not apply); `gamma` and `date` (UTC, ISO 8601) are filled in when absent.
    """
    path = Path(path)
    if path.suffix != ".parquet":
        raise InputError(path, None, "an acceptance trace must be a .parquet file")
    clean = _validate_rows(df, path)
    gamma = trace_gamma(clean)
    meta = {"gamma": gamma, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **meta}
    _validate_meta(meta, sidecar_path(path), gamma)
    write_with_sidecar(path, lambda tmp: write_parquet(clean, tmp), meta)


def read_trace_metadata(path: str | Path) -> dict[str, Any]:
    """The sidecar as a dict; a missing or malformed sidecar is an InputError."""
    side = sidecar_path(path)
    if not side.exists():
        raise InputError(side, None, "missing sidecar (every acceptance trace needs NAME.json)")
    return read_json_object(side, "sidecar")


def update_trace_metadata(path: str | Path, updates: dict[str, Any]) -> None:
    """Merge `updates` into an existing, valid sidecar (atomically)."""
    meta = read_trace_metadata(path)
    meta.update(updates)
    write_json(sidecar_path(path), meta)


def _validate_meta(meta: dict[str, Any], side: Path, gamma: int) -> None:
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise InputError(side, None, f"sidecar lacks key(s) {', '.join(map(repr, missing))}")
    if meta["gamma"] != gamma:
        raise InputError(side, None, f"sidecar gamma {meta['gamma']!r} != trace gamma {gamma}")


def _validate_rows(df: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """Check every cell; return canonical dtypes sorted by (seq_id, round).

    Rows in errors are 1-based positions in the file (or the frame being written).
    """
    require_columns(df, path, BASE_COLUMNS)
    gammas = numeric_column(df, path, "gamma", positive=True, integer=True)
    if (gammas != gammas[0]).any():
        i = int(np.argmax(gammas != gammas[0]))
        raise InputError(path, i + 1, f"gamma {gammas[i]:g} differs from row 1's {gammas[0]:g}")
    gamma = int(gammas[0])
    confs, tvs = conf_columns(gamma), tv_columns(gamma)
    require_columns(df, path, confs)
    has_tv = any(c in df.columns for c in tvs)
    if has_tv:
        require_columns(df, path, tvs)

    out = pd.DataFrame(
        {
            "seq_id": numeric_column(df, path, "seq_id", integer=True).astype(np.int64),
            "round": numeric_column(df, path, "round", nonnegative=True, integer=True).astype(
                np.int32
            ),
            "domain": _domain_column(df, path),
            "gamma": gammas.astype(np.int32),
        }
    )
    for col in confs + (tvs if has_tv else []):
        out[col] = _probability_column(df, path, col)
    accepted = numeric_column(df, path, "accepted", nonnegative=True, integer=True)
    if (accepted > gamma).any():
        i = int(np.argmax(accepted > gamma))
        raise InputError(path, i + 1, f"column 'accepted': {accepted[i]:g} exceeds gamma {gamma}")
    out["accepted"] = accepted.astype(np.int32)

    out = out.sort_values(["seq_id", "round"], kind="stable")
    _check_sequences(out, path)
    return out.reset_index(drop=True)


def _domain_column(df: pd.DataFrame, path: str | Path) -> np.ndarray:
    raw = df["domain"]
    bad = raw.isna().to_numpy() | (raw.astype(str).str.strip() == "").to_numpy()
    if bad.any():
        raise InputError(path, int(np.argmax(bad)) + 1, "column 'domain': missing or empty")
    return raw.astype(str).to_numpy(dtype=object)


def _probability_column(df: pd.DataFrame, path: str | Path, col: str) -> np.ndarray:
    values = numeric_column(df, path, col)
    outside = (values < 0) | (values > 1)
    if outside.any():
        i = int(np.argmax(outside))
        raise InputError(path, i + 1, f"column {col!r}: {float(values[i]):g} is outside [0, 1]")
    return values


def _check_sequences(out: pd.DataFrame, path: str | Path) -> None:
    """Each sequence has rounds 0, 1, 2, ... (no gaps, no repeats) and one domain."""
    seq = out["seq_id"].to_numpy()
    rnd = out["round"].to_numpy(np.int64)
    dom = out["domain"].to_numpy()
    rows = out.index.to_numpy() + 1  # file rows of the sorted order
    first = np.r_[True, seq[1:] != seq[:-1]]
    expected = np.where(first, 0, np.r_[0, rnd[:-1] + 1])
    wrong = rnd != expected
    if wrong.any():
        i = int(np.argmax(wrong))
        raise InputError(
            path,
            int(rows[i]),
            f"seq_id {seq[i]}: round {rnd[i]} where round {expected[i]} was expected "
            "(rounds must run 0, 1, 2, ... without gaps or repeats)",
        )
    mixed = ~first & (dom != np.r_[dom[:1], dom[:-1]])
    if mixed.any():
        i = int(np.argmax(mixed))
        raise InputError(path, int(rows[i]), f"seq_id {seq[i]}: domain changes within a sequence")
