"""Reading tabular inputs (CSV, JSONL, parquet) with one-line, row-precise errors."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from dsim.errors import InputError
from dsim.fileio import SCHEMA_KEY, SCHEMA_VERSION
from dsim.inputs import input_file


def read_table(path: str | Path) -> pd.DataFrame:
    """Load a CSV, JSONL or parquet file by extension; any parse failure becomes an InputError."""
    path = input_file(path)
    if path.stat().st_size == 0:
        raise InputError(path, None, "file is empty")
    if path.suffix != ".parquet":
        _check_utf8(path)
    try:
        if path.suffix == ".parquet":
            check_schema_version(path)
            df = pd.read_parquet(path)
        elif path.suffix in (".jsonl", ".json"):
            df = pd.read_json(path, lines=True)
        else:
            df = pd.read_csv(path, skipinitialspace=True)
    except ValueError as exc:  # pandas raises ValueError subclasses for malformed files
        raise InputError(path, None, f"cannot parse: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # pyarrow / csv errors
        raise InputError(path, None, f"cannot parse: {str(exc).splitlines()[0]}") from None
    if df.empty:
        raise InputError(path, None, "no data rows")
    return df


def check_schema_version(path: Path) -> None:
    """Refuse a Parquet file written by a newer dsim (its columns may mean something else);
    files without the stamp (older dsim, other tools) are read as they are."""
    stamp = (pq.read_schema(path).metadata or {}).get(SCHEMA_KEY)
    if stamp is not None and int(stamp) > SCHEMA_VERSION:
        raise InputError(
            path,
            None,
            f"schema version {int(stamp)} is newer than this dsim reads ({SCHEMA_VERSION})",
        )


_COMPRESSED = {b"\x1f\x8b": "gzip", b"PK": "zip", b"\x28\xb5": "zstd", b"BZ": "bzip2"}


def _check_utf8(path: Path) -> None:
    """Text tables must be UTF-8; the error names the data row (a CSV's header is no row, a JSON
    line is one), not a byte; a compressed file is named as such."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        kind = _COMPRESSED.get(data[:2])
        if kind is not None:
            problem = f"{kind}-compressed: dsim reads plain CSV, JSON lines or Parquet"
            problem += "; decompress it"
            raise InputError(path, None, problem) from None
        line = data.count(b"\n", 0, exc.start)  # 0-based
        row = line + 1 if path.suffix in (".jsonl", ".json") else line
        if row == 0:
            raise InputError(path, None, "not UTF-8 text in its header") from None
        raise InputError(path, row, "not UTF-8 text") from None


def require_columns(df: pd.DataFrame, path: str | Path, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(path, None, f"missing column(s) {', '.join(map(repr, missing))}")


def numeric_column(
    df: pd.DataFrame,
    path: str | Path,
    column: str,
    *,
    positive: bool = False,
    nonnegative: bool = False,
    integer: bool = False,
    at_most: float | None = None,
) -> np.ndarray:
    """Column as float64, rejecting non-numeric cells, NaN, inf and values of the wrong sign.

    Rows are reported 1-based, counting data rows (the header is not a row). Messages name the
    row and column, never the cell's text (a file's contents stay out of the terminal).
    """
    raw = df[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        if pd.isna(raw.iloc[i]):
            what = "missing or NaN value"
        else:
            what = "infinite value" if np.isinf(values[i]) else "non-numeric value"
        raise InputError(path, i + 1, f"column {column!r}: {what}")
    for flag, fails, text in (
        (positive, values <= 0, "must be positive"),
        (nonnegative, values < 0, "must not be negative"),
        (integer, values != np.round(values), "must be an integer"),
        (at_most is not None, values > (at_most or 0), f"must be at most {at_most}"),
    ):
        if flag and fails.any():
            i = int(np.argmax(fails))
            raise InputError(path, i + 1, f"column {column!r}: {text}")
    return values


def check_sorted(values: np.ndarray, path: str | Path, column: str) -> None:
    drops = np.diff(values) < 0
    if drops.any():
        i = int(np.argmax(drops)) + 2
        raise InputError(path, i, f"column {column!r}: not sorted (goes back in time)")
