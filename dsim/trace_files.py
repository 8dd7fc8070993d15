"""Trace files -> request rows: the layouts dsim knows by their columns (Azure, BurstGPT,
Mooncake), any CSV/JSONL through a column mapping, and a `vllm bench serve` result JSON.

Detection is strict, because a wrong guess is silent: a timestamp read in the wrong unit
simulates the log 1,000 times too fast or too slow. A layout is recognised only by all three
of its columns and its file kind (Mooncake's millisecond timestamps only in a .jsonl); anything
else is refused with the layouts and the mapping to write (`dsim.spec_grammar.trace_file`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.errors import InputError
from dsim.inputs import input_file
from dsim.spec_grammar import TraceMapping
from dsim.tables import check_sorted, numeric_column, read_table, require_columns


@dataclass(frozen=True)
class Layout:
    """A trace layout dsim recognises by its columns, in the file kinds it comes as."""

    label: str
    mapping: TraceMapping
    suffixes: tuple[str, ...]


LAYOUTS = (
    Layout(
        "Azure CSV",
        TraceMapping("TIMESTAMP", "iso", "ContextTokens", "GeneratedTokens"),
        (".csv",),
    ),
    Layout(
        "BurstGPT CSV",
        TraceMapping("Timestamp", "s", "Request tokens", "Response tokens"),
        (".csv",),
    ),
    Layout(
        "Mooncake JSONL",
        TraceMapping("timestamp", "ms", "input_length", "output_length"),
        (".jsonl",),
    ),
)
# The longest span a trace may cover: beyond it a timestamp is a typo (year 9999) or in the
# wrong unit, and would simulate centuries.
MAX_SPAN_S = 366 * 86400.0
_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
# What `vllm bench serve --save-result --save-detailed` writes per request, in send order
# (vllm-project/vllm, vllm/benchmarks/serve.py at commit def9ce85): the prompt and output
# token counts, but no send times; the run's request_rate, burstiness and max_concurrency
# are written beside them.
VLLM_KEYS = ("input_lens", "output_lens")
VLLM_SOURCE = "vllm/benchmarks/serve.py (vllm-project/vllm @ def9ce85)"


@dataclass(frozen=True)
class TraceRows:
    """A trace file's requests in file order. `arrival_s` is None when the file has no send
    times (a vLLM benchmark result): then `rate`, `burstiness` and `concurrency` are the
    benchmark's settings it records, to redraw them as the benchmark drew them."""

    arrival_s: np.ndarray | None
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    about: str  # what the file is and how it was read, for the run's title and table
    rate: float = float("inf")
    burstiness: float = 1.0
    concurrency: int | None = None


def describe_layouts() -> str:
    """The layouts dsim recognises, for error messages and help."""
    known = [
        f"{x.label} ({x.mapping.timestamp} in {x.mapping.unit}, {x.mapping.prompt}, "
        f"{x.mapping.output})"
        for x in LAYOUTS
    ]
    return "; ".join([*known, f"a vllm bench serve --save-detailed JSON ({', '.join(VLLM_KEYS)})"])


def _detect(df: pd.DataFrame, path: Path) -> Layout:
    """The one layout whose timestamp column and file kind the file has (its other columns
    then required); else refused, saying the layouts and the mapping to write."""
    found = [x for x in LAYOUTS if x.mapping.timestamp in df.columns and path.suffix in x.suffixes]
    if len(found) == 1:
        missing = [c for c in found[0].mapping.columns() if c not in df.columns]
        if not missing:
            return found[0]
        what = f"missing column(s) {', '.join(map(repr, missing))} of the {found[0].label} layout"
    elif found:
        what = "matches several layouts"
    else:
        kind = [x.label for x in LAYOUTS if set(x.mapping.columns()) <= set(df.columns)]
        suffix = path.suffix or "file without a suffix"
        what = f"has {kind[0]}'s columns but is a {suffix}" if kind else "has no known layout"
    raise InputError(
        path,
        None,
        f"{what}; dsim recognises "
        f"{describe_layouts()}; for another layout say which column is which: --trace "
        f"'{_suggest(df, path)}' (UNIT: s, ms, us or iso{_spans(df)})",
    )


def _suggest(df: pd.DataFrame, path: Path) -> str:
    """The mapping to write for `df`, with its columns where their names say their role."""
    words = {
        "timestamp": ("time", "ts", "arrival", "date"),
        "prompt": ("prompt", "input", "request", "context"),
        "output": ("output", "completion", "response", "generated"),
    }
    cols = _names(df)
    pick = {
        role: next((c for c in cols if any(w in c.lower() for w in hints)), "COL")
        for role, hints in words.items()
    }
    return (
        f"{path}[timestamp={pick['timestamp']}:UNIT,prompt={pick['prompt']},"
        f"output={pick['output']}]"
    )


def _names(df: pd.DataFrame) -> list[str]:
    """The header cells that read as column names (a file that is no table has none: its
    first line is content, never echoed)."""
    return [str(c) for c in df.columns if re.fullmatch(r"[\w .-]{1,40}", str(c))]


def _spans(df: pd.DataFrame) -> str:
    """How long a numeric timestamp column spans in each unit, so the right one stands out."""
    col = next((c for c in _names(df) if "time" in c.lower()), None)
    values = pd.to_numeric(df[col], errors="coerce") if col is not None else None
    if values is None or values.isna().any() or len(values) < 2:
        return ""
    span = float(values.max() - values.min())
    rows = len(values)
    reads = ", ".join(
        f"{span * k:.4g} s ({(rows - 1) / (span * k):.4g} req/s) in {u}"
        for u, k in _SCALE.items()
        if span > 0
    )
    return f"; column {col!r} spans {reads}" if reads else ""


def read_trace(path: Path, mapping: TraceMapping | None) -> TraceRows:
    """A trace file's rows: by `mapping` when given, else by its recognised layout."""
    if mapping is None and path.suffix == ".json":
        vllm = _vllm_result(path)
        if vllm is not None:
            return vllm
    df = read_table(path)
    label = "mapped"
    if mapping is None:
        layout = _detect(df, path)
        mapping, label = layout.mapping, layout.label
        if layout.label.startswith("BurstGPT"):  # failed requests are logged with 0 tokens
            out = pd.to_numeric(df[mapping.output], errors="coerce")
            df = df[out != 0].reset_index(drop=True)
    require_columns(df, path, mapping.columns())
    arrival = _timestamps(df, path, mapping)
    check_sorted(arrival, path, mapping.timestamp)
    arrival = arrival - arrival[0]
    too_late = arrival > MAX_SPAN_S
    if too_late.any():
        raise InputError(
            path,
            int(np.argmax(too_late)) + 1,
            f"column {mapping.timestamp!r}: more than {MAX_SPAN_S / 86400:g} days after the "
            f"first arrival (is its unit, {mapping.unit}, right?)",
        )
    prompt = numeric_column(df, path, mapping.prompt, positive=True, integer=True)
    output = numeric_column(df, path, mapping.output, positive=True, integer=True)
    about = f"{path.name} ({label}: {mapping.timestamp} in {mapping.unit})"
    return TraceRows(arrival, prompt.astype(np.int64), output.astype(np.int64), about)


def _timestamps(df: pd.DataFrame, path: Path, mapping: TraceMapping) -> np.ndarray:
    column = mapping.timestamp
    if mapping.unit == "iso":
        ts = pd.to_datetime(df[column], errors="coerce", format="mixed")
        bad = ts.isna().to_numpy()
        if bad.any():
            raise InputError(path, int(np.argmax(bad)) + 1, f"column {column!r}: bad timestamp")
        return (ts - ts.iloc[0]).dt.total_seconds().to_numpy(np.float64)
    return numeric_column(df, path, column, nonnegative=True) * _SCALE[mapping.unit]


def _vllm_result(path: Path) -> TraceRows | None:
    """A `vllm bench serve --save-result --save-detailed` JSON's requests (failed ones
    dropped: their output_lens is 0), or None for another .json."""
    try:
        data = json.loads(input_file(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None  # not one JSON document: read as JSON lines
    if not isinstance(data, dict) or not any(k in data for k in (*VLLM_KEYS, "request_rate")):
        return None
    if not all(isinstance(data.get(k), list) for k in VLLM_KEYS):
        raise InputError(
            path,
            None,
            "a vllm bench serve result without per-request lengths: rerun the benchmark with "
            "--save-detailed (it keeps input_lens and output_lens)",
        )
    df = pd.DataFrame({k: data[k] for k in VLLM_KEYS})
    failed = pd.to_numeric(df["output_lens"], errors="coerce") == 0
    df = df[~failed].reset_index(drop=True)
    if df.empty:
        raise InputError(path, None, "every request of this benchmark run failed")
    prompt = numeric_column(df, path, "input_lens", positive=True, integer=True)
    output = numeric_column(df, path, "output_lens", positive=True, integer=True)
    rate = data.get("request_rate", "inf")
    rate = float("inf") if rate in ("inf", None) else float(rate)
    burstiness = float(data.get("burstiness") or 1.0)
    concurrency = data.get("max_concurrency")
    dropped = f", {int(failed.sum())} failed dropped" if failed.any() else ""
    about = (
        f"{path.name} (vllm bench serve result{dropped}; lengths in its order; it holds no "
        f"send times ({VLLM_SOURCE} writes none), so they are redrawn as the benchmark draws "
        "them from its request_rate and burstiness)"
    )
    return TraceRows(
        None,
        prompt.astype(np.int64),
        output.astype(np.int64),
        about,
        rate,
        burstiness,
        None if concurrency is None else int(concurrency),
    )
