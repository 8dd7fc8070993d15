"""Trace files -> request rows: the layouts dsim knows by their columns (Azure, BurstGPT,
Mooncake), any CSV/JSONL through a column mapping, and a `vllm bench serve` result JSON.

Detection is strict, because a wrong guess is silent: a timestamp read in the wrong unit
simulates the log 1,000 times too fast or too slow. A layout is recognised only by all three
of its columns and its file kind (Mooncake's millisecond timestamps only in a .jsonl); anything
else is refused with the layouts and the mapping to write (`dsim.spec_grammar.trace_file`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.checks import finite
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
# The words of a column's name that state its unit (`arrival_ms`, `time_s`, `elapsedSeconds`).
_UNIT_WORDS = {
    "s": ("s", "sec", "secs", "second", "seconds"),
    "ms": ("ms", "msec", "msecs", "millis", "millisecond", "milliseconds"),
    "us": ("us", "usec", "usecs", "micros", "microsecond", "microseconds"),
}
# Mean arrival rates (req/s) a serving log plausibly has: outside them a timestamp read in the
# wrong unit is likelier (one request per 100 s, or more than a large cluster serves).
PLAUSIBLE_RATE = (0.01, 10_000.0)
RATE_ROWS = 10  # fewer arrivals say little of a rate (two requests 126 s apart are a sample)
# The most tokens a request may have, as the README's other counts (--kv-tokens, --max-requests):
# beyond it a count is a typo or an overflow, and would ask the engine for terabytes of KV.
MAX_TOKENS = 2**40
# What `vllm bench serve --save-result --save-detailed` writes per request, in send order
# (vllm-project/vllm, vllm/benchmarks/serve.py at commit def9ce85): the prompt and output
# token counts, but no send times; the run's request_rate, burstiness and max_concurrency
# are written beside them.
VLLM_KEYS = ("input_lens", "output_lens")
VLLM_SOURCE = "vllm/benchmarks/serve.py (vllm-project/vllm @ def9ce85)"
ENTRIES = " (rows count the list's entries from 1)"  # a JSON list's row, in its errors


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
    note: str = ""  # a doubt about the timestamps' unit, said when they are used (`unit_note`)


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
    label, kept = "mapped", None
    if mapping is None:
        layout = _detect(df, path)
        mapping, label = layout.mapping, layout.label
        if layout.label.startswith("BurstGPT"):  # failed requests are logged with 0 tokens
            keep = (pd.to_numeric(df[mapping.output], errors="coerce") != 0).to_numpy()
            if not keep.any():
                raise InputError(path, None, f"every request failed ({mapping.output!r} is 0)")
            df, kept = df[keep].reset_index(drop=True), np.flatnonzero(keep) + 1
    require_columns(df, path, mapping.columns())
    with _file_rows(kept):
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
        prompt, output = (
            numeric_column(df, path, c, positive=True, integer=True, at_most=MAX_TOKENS)
            for c in (mapping.prompt, mapping.output)
        )
    about = f"{path.name} ({label}: {mapping.timestamp} in {mapping.unit})"
    note = unit_note(path, mapping, label, arrival)
    return TraceRows(arrival, prompt.astype(np.int64), output.astype(np.int64), about, note=note)


@contextmanager
def _file_rows(kept: np.ndarray | None) -> Iterator[None]:
    """Errors about the rows left after a drop name the file's own rows (`kept`: their 1-based
    data-row numbers), not their positions among the rows kept."""
    try:
        yield
    except InputError as exc:
        if kept is None or exc.row is None:
            raise
        raise InputError(exc.path, int(kept[exc.row - 1]), exc.problem) from None


def stated_unit(column: str) -> str | None:
    """The unit a column's name states as one of its words (`arrival_ms`, `Time (sec)`,
    `tsMs`), or None when it states none (or several)."""
    words = re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", column).lower())
    stated = {unit for unit, names in _UNIT_WORDS.items() if set(words) & set(names)}
    return stated.pop() if len(stated) == 1 else None


def unit_note(path: Path, mapping: TraceMapping, label: str, arrival: np.ndarray) -> str:
    """What to tell the user when the timestamps look read in the wrong unit (the column's name
    says another, or the mean rate is outside PLAUSIBLE_RATE), with the mapping that gives the
    unit; "" when nothing looks wrong. A note, not an error: a log may be that sparse. The rate
    is judged on RATE_ROWS arrivals or more."""
    column, unit = mapping.timestamp, mapping.unit
    stated = stated_unit(column)
    n, span = len(arrival), float(arrival[-1])
    rate = (n - 1) / span if span > 0 else None
    if stated not in (None, unit):
        why, fix = f"but its name says {stated}", stated
    elif n >= RATE_ROWS and rate is not None and not PLAUSIBLE_RATE[0] <= rate <= PLAUSIBLE_RATE[1]:
        low, high = PLAUSIBLE_RATE
        why, fix = f"outside the {low:g} to {high:,g} req/s of a serving log", "UNIT"
    else:
        return ""
    shown = f" at {rate:.4g} req/s" if rate is not None else ", all at one time"
    how = "as mapped" if label == "mapped" else f"as the {label} layout reads it"
    units = "" if fix == stated else " (UNIT: s, ms, us or iso)"
    return (
        f"{path}: column {column!r} read in {unit} ({how}) gives {n:,} requests{shown}, "
        f"{why}; if {unit} is not its unit, give the right one: --trace "
        f"'{path}[timestamp={column}:{fix},prompt={mapping.prompt},output={mapping.output}]'"
        f"{units}"
    )


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
    if not all(k in data for k in VLLM_KEYS):
        raise InputError(
            path,
            None,
            "a vllm bench serve result without per-request lengths: rerun the benchmark with "
            "--save-detailed (it keeps input_lens and output_lens)",
        )
    prompt, output = (_lengths(data[k], path, k) for k in VLLM_KEYS)
    if len(prompt) != len(output):
        raise InputError(
            path,
            None,
            f"input_lens has {len(prompt):,} entries but output_lens {len(output):,}: a result "
            "has one of each per request",
        )
    failed = output == 0
    if failed.all():
        raise InputError(path, None, "every request of this benchmark run failed")
    empty = (prompt == 0) & ~failed
    if empty.any():
        problem = f"input_lens: 0 tokens for a request that did not fail{ENTRIES}"
        raise InputError(path, int(np.argmax(empty)) + 1, problem)
    rate = data.get("request_rate")
    if isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity"):
        rate = math.inf  # as vLLM writes an infinite rate
    rate = _setting(path, "request_rate", rate, math.inf, 'a positive number or "inf"')
    burstiness = _setting(
        path, "burstiness", data.get("burstiness"), 1.0, "a positive finite number", math.isfinite
    )
    concurrency = _setting(
        path,
        "max_concurrency",
        data.get("max_concurrency"),
        None,
        "a positive integer or null",
        lambda v: float(v).is_integer(),
    )
    dropped = f", {int(failed.sum())} failed dropped" if failed.any() else ""
    about = (
        f"{path.name} (vllm bench serve result{dropped}; lengths in its order; it holds no "
        f"send times ({VLLM_SOURCE} writes none), so they are redrawn as the benchmark draws "
        "them from its request_rate and burstiness)"
    )
    return TraceRows(
        None,
        prompt[~failed],
        output[~failed],
        about,
        float(rate),
        float(burstiness),
        None if concurrency is None else int(concurrency),
    )


def _lengths(values: object, path: Path, key: str) -> np.ndarray:
    """A result's per-request token counts: a non-empty list of integers from 0 (a failed
    request's output) to MAX_TOKENS, JSON numbers only (a string or boolean is no count)."""
    if not isinstance(values, list) or not values:
        got = "an empty list" if values == [] else _json_type(values)
        raise InputError(path, None, f"{key} must be a non-empty list of token counts, got {got}")
    for row, v in enumerate(values, 1):
        number = isinstance(v, int | float) and not isinstance(v, bool)
        if not (number and finite(v) and float(v).is_integer() and 0 <= v <= MAX_TOKENS):
            problem = "not an integer from 0 to 2^40" if number else f"{_json_type(v)}, not a count"
            raise InputError(path, row, f"{key}: {problem}{ENTRIES}")
    return np.array(values, dtype=np.float64).astype(np.int64)


def _setting(
    path: Path, key: str, value: object, default: object, wanted: str, ok=lambda v: True
) -> object:
    """A benchmark setting the result records: missing or null is vLLM's default; anything but
    a positive JSON number that `ok` accepts is refused naming the key (NaN is not positive)."""
    if value is None:
        return default
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not (number and (isinstance(value, float) or finite(value)) and value > 0 and ok(value)):
        got = f"{value:g}" if number else _json_type(value)
        raise InputError(path, None, f"{key} must be {wanted}, got {got}")
    return value


def _json_type(value: object) -> str:
    """A JSON value's kind, for a message that names what was found without echoing it."""
    kinds = {str: "a string", bool: "a boolean", list: "a list", dict: "an object"}
    return "null" if value is None else kinds.get(type(value), "a number")
