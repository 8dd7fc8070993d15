"""Arrival traces -> arrays: Azure 2023/2024 CSV, BurstGPT CSV, Mooncake JSONL, synthetic.

A workload is three aligned arrays sorted by arrival: arrival_s (seconds from the trace's
start), prompt_tokens and output_tokens. Every request emits at least one token (its prefill
step emits the first), so token counts must be positive.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dsim import spec_grammar
from dsim.checks import check_number
from dsim.errors import InputError
from dsim.tables import check_sorted, numeric_column, read_table, require_columns


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray  # closed loop: the earliest send times (the client sends later)
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str
    concurrency: int | None = None  # a closed-loop client: at most this many in flight
    end: float | None = None  # where the trace's time ends (None: at its last arrival)

    def __post_init__(self) -> None:
        """Arrivals within MAX_SPAN_S, whatever made them (a rate of 1e-300, a rate scale that
        stretches the trace): past it a step's milliseconds would vanish into the clock."""
        span = float(np.max(self.arrival_s, initial=0.0))
        if not (np.isfinite(self.arrival_s).all() and span <= MAX_SPAN_S):
            shown = f"{span:g} s" if np.isfinite(self.arrival_s).all() else "beyond any float"
            raise InputError(
                self.source,
                None,
                f"arrivals span {shown}, more than {MAX_SPAN_S / 86400:g} days: raise the "
                "rate (rate=, --rate-scale, --qps) or shorten the trace",
            )

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def end_s(self) -> float:
        """The time the trace covers: a synthetic trace's duration, else its last arrival."""
        return float(self.arrival_s[-1]) if self.end is None else self.end

    def wrapped(self, until: float) -> Workload:
        """The trace replayed end to end until `until` seconds: copy k starts k periods later,
        a period being the span plus one mean gap between arrivals (`end` if set)."""
        n = len(self)
        span = self.end_s if self.end is not None or n < 2 else self.end_s * n / (n - 1)
        if span <= 0:
            raise InputError(self.source, None, "cannot wrap a trace whose arrivals span 0 s")
        copies = int(np.floor(until / span)) + 1
        check_number(copies * n, "requests of the wrapped trace", le=MAX_REQUESTS)
        offsets = np.repeat(np.arange(copies, dtype=np.float64) * span, n)
        return Workload(
            np.tile(self.arrival_s, copies) + offsets,
            np.tile(self.prompt_tokens, copies),
            np.tile(self.output_tokens, copies),
            self.source,
            self.concurrency,
            copies * span,
        )

    def window(self, start: float, end: float | None) -> Workload:
        """Keep arrivals in [start, end) seconds, re-based so the window starts at 0."""
        hi = np.inf if end is None else end
        keep = (self.arrival_s >= start) & (self.arrival_s < hi)
        if not keep.any():
            raise InputError(self.source, None, f"no arrivals in window {start}:{end}")
        return Workload(
            self.arrival_s[keep] - start,
            self.prompt_tokens[keep],
            self.output_tokens[keep],
            self.source,
            self.concurrency,
            None if self.end is None else min(self.end, hi) - start,
        )

    def scale_rate(self, factor: float) -> Workload:
        """factor 2 = twice the load: inter-arrival times divided by the factor."""
        check_number(factor, "rate scale", gt=0, where=self.source)
        return Workload(
            self.arrival_s / factor,
            self.prompt_tokens,
            self.output_tokens,
            self.source,
            self.concurrency,
            None if self.end is None else self.end / factor,
        )

    def head(self, n: int) -> Workload:
        return Workload(
            self.arrival_s[:n],
            self.prompt_tokens[:n],
            self.output_tokens[:n],
            self.source,
            self.concurrency,
        )


# Largest workload dsim builds (about 100 bytes a request across the engine's arrays), and the
# longest trace span it accepts: beyond these, a typo (duration=1e12, a year-9999 timestamp)
# would otherwise ask for terabytes or simulate centuries.
MAX_REQUESTS = 20_000_000
MAX_SPAN_S = 366 * 86400.0

# Column names of each file format: (timestamp, prompt, output).
_FORMATS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
}


def _detect(df: pd.DataFrame, path: Path) -> str:
    for name, cols in _FORMATS.items():
        if cols[0] in df.columns:
            return name
    known = "; ".join(f"{n}: {', '.join(c)}" for n, c in _FORMATS.items())
    raise InputError(path, None, f"unknown trace format; expected the columns of {known}")


def _timestamps(df: pd.DataFrame, path: Path, fmt: str, column: str) -> np.ndarray:
    if fmt == "azure":
        ts = pd.to_datetime(df[column], errors="coerce", format="mixed")
        bad = ts.isna().to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(path, i + 1, f"column {column!r}: bad timestamp")
        return (ts - ts.iloc[0]).dt.total_seconds().to_numpy(np.float64)
    seconds = numeric_column(df, path, column, nonnegative=True)
    return seconds / 1e3 if fmt == "mooncake" else seconds


def load_trace(path: str | Path) -> Workload:
    """Read an arrival trace, detecting its format from the columns."""
    path = Path(path)
    df = read_table(path)
    fmt = _detect(df, path)
    ts_col, prompt_col, out_col = _FORMATS[fmt]
    require_columns(df, path, _FORMATS[fmt])
    if fmt == "burstgpt":  # failed requests are logged with zero response tokens
        df = df[pd.to_numeric(df[out_col], errors="coerce") != 0].reset_index(drop=True)
    arrival = _timestamps(df, path, fmt, ts_col)
    check_sorted(arrival, path, ts_col)
    too_late = arrival - arrival[0] > MAX_SPAN_S
    if too_late.any():
        raise InputError(
            path,
            int(np.argmax(too_late)) + 1,
            f"column {ts_col!r}: more than {MAX_SPAN_S / 86400:g} days after the first arrival",
        )
    prompt = numeric_column(df, path, prompt_col, positive=True, integer=True)
    output = numeric_column(df, path, out_col, positive=True, integer=True)
    return Workload(
        arrival - arrival[0], prompt.astype(np.int64), output.astype(np.int64), str(path)
    )


_SYNTH_DEFAULTS = {
    "rate": "4",
    "cv": "1",
    "duration": "600",
    "prompt": "1024",
    "output": "256",
    "sigma": "0.8",
}


def synthetic(spec: str, seed: int) -> Workload:
    """`synthetic:rate=4,cv=1,duration=600,prompt=1024,output=256,sigma=0.8[,n=N][,lengths=PATH]
    [,concurrency=C]`.

    Arrivals are a renewal process with Gamma inter-arrival times (cv=1 is Poisson, cv>1 bursty);
    lengths are lognormal with the given means and log-sigma, or resampled from a trace file.
    `concurrency=C` is a closed-loop client: at most C requests in flight, a new one sent when
    one finishes; with `rate=` the renewal times are the earliest sends, without it every request
    is due at 0 (then `n=` is required).
    """
    given = spec_grammar.synthetic(spec, (*_SYNTH_DEFAULTS, "n", "lengths", "concurrency"))
    opts = {**_SYNTH_DEFAULTS, **given}
    name = f"trace spec {spec!r}:"
    rate = spec_grammar.number(opts["rate"], f"{name} rate", gt=0)
    cv = spec_grammar.number(opts["cv"], f"{name} cv", ge=1e-3, le=100)
    duration = spec_grammar.number(opts["duration"], f"{name} duration", gt=0)
    means = [
        spec_grammar.number(opts[k], f"{name} {k}", gt=0, le=1e9) for k in ("prompt", "output")
    ]
    sigma = spec_grammar.number(opts["sigma"], f"{name} sigma", ge=0, le=10)
    if "n" in opts:
        n = int(spec_grammar.number(opts["n"], f"{name} n", integer=True, ge=1, le=MAX_REQUESTS))
    elif rate * duration > MAX_REQUESTS:  # checked before allocating anything
        raise InputError(None, None, f"{name} rate x duration is more than {MAX_REQUESTS} requests")
    else:
        n = int(np.ceil(rate * duration * 1.5)) + 10
    concurrency = None
    if "concurrency" in opts:
        concurrency = int(
            spec_grammar.number(opts["concurrency"], f"{name} concurrency", integer=True, ge=1)
        )
        if "rate" not in given and "n" not in opts:
            raise InputError(None, None, f"{name} concurrency without rate needs n=")
    rng = np.random.default_rng([seed, 0x5EED])
    shape = 1.0 / cv**2
    arrival = np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))
    arrival -= arrival[0]
    if concurrency is not None and "rate" not in given:
        arrival = np.zeros(n)
    if "n" not in opts:
        arrival = arrival[arrival < duration]
    k = len(arrival)
    if "lengths" in opts:
        pool = load_trace(opts["lengths"])
        pick = rng.integers(0, len(pool), size=k)
        prompt, output = pool.prompt_tokens[pick], pool.output_tokens[pick]
    else:
        prompt, output = (
            np.maximum(1, np.round(rng.lognormal(np.log(m) - sigma**2 / 2, sigma, size=k)))
            for m in means
        )
    end = None if "n" in opts or not k else duration
    return Workload(
        arrival, prompt.astype(np.int64), output.astype(np.int64), spec, concurrency, end
    )


def load_workload(spec: str, seed: int = 0) -> Workload:
    """A trace path or a `synthetic:...` spec."""
    if spec.startswith("synthetic"):
        return synthetic(spec, seed)
    return load_trace(spec)
