"""Arrival traces -> arrays: Azure 2023/2024 CSV, BurstGPT CSV, Mooncake JSONL, synthetic.

A workload is three aligned arrays sorted by arrival: arrival_s (seconds from the trace's
start), prompt_tokens and output_tokens. Every request emits at least one token (its prefill
step emits the first), so token counts must be positive.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dsim import shipped, spec_grammar
from dsim.checks import check_number
from dsim.errors import InputError, Notice
from dsim.trace_files import MAX_SPAN_S, read_trace


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray  # closed loop: the earliest send times (the client sends later)
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str
    concurrency: int | None = None  # a closed-loop client: at most this many in flight
    end: float | None = None  # where the trace's time ends (None: at its last arrival)
    about: str = ""  # what the trace is, as read (its file, layout, span and rate)

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
        return replace(
            self,
            arrival_s=np.tile(self.arrival_s, copies) + offsets,
            prompt_tokens=np.tile(self.prompt_tokens, copies),
            output_tokens=np.tile(self.output_tokens, copies),
            end=copies * span,
        )

    def window(self, start: float, end: float | None) -> Workload:
        """Keep arrivals in [start, end) seconds, re-based so the window starts at 0."""
        hi = np.inf if end is None else end
        keep = (self.arrival_s >= start) & (self.arrival_s < hi)
        if not keep.any():
            raise InputError(self.source, None, f"no arrivals in window {start}:{end}")
        return replace(
            self,
            arrival_s=self.arrival_s[keep] - start,
            prompt_tokens=self.prompt_tokens[keep],
            output_tokens=self.output_tokens[keep],
            end=None if self.end is None else min(self.end, hi) - start,
        )

    def scale_rate(self, factor: float) -> Workload:
        """factor 2 = twice the load: inter-arrival times divided by the factor."""
        check_number(factor, "rate scale", gt=0, where=self.source)
        return replace(
            self,
            arrival_s=self.arrival_s / factor,
            end=None if self.end is None else self.end / factor,
        )

    def rate_spread(self, parts: int = 10) -> tuple[float, float] | None:
        """The arrival rate (req/s) in the quietest and the busiest of `parts` equal slices of
        the arrivals' span; None for a closed loop, or too few arrivals to tell (a slice
        should expect 50, so a Poisson trace's slices stay within 2x of each other)."""
        n, span = len(self), float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0
        if self.concurrency is not None or n < 50 * parts or span <= 0:
            return None
        counts = np.histogram(self.arrival_s, bins=parts)[0]
        return counts.min() * parts / span, counts.max() * parts / span

    def head(self, n: int) -> Workload:
        return replace(
            self,
            arrival_s=self.arrival_s[:n],
            prompt_tokens=self.prompt_tokens[:n],
            output_tokens=self.output_tokens[:n],
            end=None,
        )


# Largest workload dsim builds (about 100 bytes a request across the engine's arrays): beyond
# it, a typo (duration=1e12) would otherwise ask for terabytes.
MAX_REQUESTS = 20_000_000


def load_trace(text: str | Path, seed: int = 0, *, timed: bool = True) -> Workload:
    """Read an arrival trace, `FILE` (its layout recognised by its columns) or `FILE[mapping]`
    (`dsim.trace_files`; a relative FILE dsim ships is found wherever it runs, `shipped`); a
    file without send times (a vLLM benchmark result) has them drawn as the benchmark draws
    them, from the settings it records. A doubt about the timestamps' unit is a `Notice`,
    unless `timed` is False (only the rows' lengths are used: `lengths=`)."""
    name, mapping = spec_grammar.trace_file(str(text))
    path = Path(shipped.locate(name))
    rows = read_trace(path, mapping)
    n = len(rows.prompt_tokens)
    if rows.arrival_s is None:
        rng = np.random.default_rng([seed, 0x5EED])
        arrival = bench_arrivals(n, rows.rate, rows.burstiness, rng)
        about = f"{rows.about}: {_bench_words(rows.rate, rows.burstiness, rows.concurrency)}"
        return Workload(arrival, rows.prompt_tokens, rows.output_tokens, str(path),
                        rows.concurrency, about=about)  # fmt: skip
    if rows.note and timed:
        warnings.warn(rows.note, Notice, stacklevel=2)
    arrival = rows.arrival_s
    span = float(arrival[-1])
    rate = f", {(n - 1) / span:.4g} req/s" if span > 0 else ""
    about = f"{rows.about}: {n:,} requests over {span:.4g} s{rate}"
    return Workload(arrival, rows.prompt_tokens, rows.output_tokens, str(path), about=about)


def bench_arrivals(n: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Send times as `vllm bench serve` draws them (vllm/benchmarks/serve.py, get_request):
    gamma gaps with shape = burstiness and scale = 1 / (rate x burstiness) (1: Poisson),
    summed and rescaled so the last send is at n / rate; every request at 0 for an infinite
    rate, evenly spaced for an infinite burstiness."""
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    sends = np.cumsum(gaps)
    return sends * (n / rate / sends[-1]) if sends[-1] > 0 else sends


def _bench_words(rate: float, burstiness: float, concurrency: int | None) -> str:
    """The benchmark's arrival settings in words, for the trace's description."""
    if math.isinf(rate):
        sends = "every request sent at 0 (request rate inf)"
    else:
        sends = f"gamma arrivals at {rate:g} req/s, burstiness {burstiness:g}"
    return sends + (f", at most {concurrency} in flight" if concurrency else "")


_SYNTH_DEFAULTS = {
    "rate": "4",
    "cv": "1",
    "duration": "600",
    "prompt": "1024",
    "output": "256",
    "sigma": "0.8",
}


_SYNTH_KEYS = (*_SYNTH_DEFAULTS, "n", "lengths", "concurrency", "burstiness", "range_ratio")


def synthetic(spec: str, seed: int) -> Workload:
    """`synthetic:rate=4,cv=1,duration=600,prompt=1024,output=256,sigma=0.8[,n=N][,lengths=PATH]
    [,concurrency=C][,burstiness=B][,range_ratio=R]`.

    Arrivals are a renewal process with Gamma inter-arrival times (cv=1 is Poisson, cv>1
    bursty), or with `burstiness=B` the benchmark's (`bench_arrivals`: n requests, the last
    at n / rate; `rate=inf` sends all at 0). Lengths are lognormal with the given means and
    log-sigma, or with `range_ratio=R` uniform integers as vLLM's random dataset draws them
    (`random_lengths`), or a trace file's rows in their order (cycled if the trace is longer).
    `concurrency=C` is a closed-loop client: at most C requests in flight, a new one sent when
    one finishes; with `rate=` the renewal times are the earliest sends, without it every request
    is due at 0 (then `n=` or `lengths=` is required).
    """
    given = spec_grammar.synthetic(spec, _SYNTH_KEYS)
    opts = {**_SYNTH_DEFAULTS, **given}
    name = f"trace spec {spec!r}:"
    bench = "burstiness" in given
    inf = bench and opts["rate"].strip() == "inf"
    rate = math.inf if inf else spec_grammar.number(opts["rate"], f"{name} rate", gt=0)
    cv = spec_grammar.number(opts["cv"], f"{name} cv", ge=1e-3, le=100)
    duration = spec_grammar.number(opts["duration"], f"{name} duration", gt=0)
    means = [
        spec_grammar.number(opts[k], f"{name} {k}", gt=0, le=1e9) for k in ("prompt", "output")
    ]
    sigma = spec_grammar.number(opts["sigma"], f"{name} sigma", ge=0, le=10)
    pool = load_trace(opts["lengths"], seed, timed=False) if "lengths" in opts else None
    concurrency = None
    if "concurrency" in opts:
        concurrency = int(
            spec_grammar.number(opts["concurrency"], f"{name} concurrency", integer=True, ge=1)
        )
    if "n" in opts:
        n = int(spec_grammar.number(opts["n"], f"{name} n", integer=True, ge=1, le=MAX_REQUESTS))
    elif pool is not None and (bench or (concurrency and "rate" not in given)):
        n = len(pool)  # the file's rows, once each
    elif bench or (concurrency and "rate" not in given):
        what = "burstiness=" if bench else "concurrency without rate"
        raise InputError(None, None, f"{name} {what} needs n= (or lengths=FILE)")
    elif rate * duration > MAX_REQUESTS:  # checked before allocating anything
        raise InputError(None, None, f"{name} rate x duration is more than {MAX_REQUESTS} requests")
    else:
        n = int(np.ceil(rate * duration * 1.5)) + 10
    rng = np.random.default_rng([seed, 0x5EED])
    if bench:
        b = opts["burstiness"].strip()
        b = math.inf if b == "inf" else spec_grammar.number(b, f"{name} burstiness", gt=0)
        arrival = bench_arrivals(n, rate, b, rng)
        sends = _bench_words(rate, b, concurrency)
    else:
        shape = 1.0 / cv**2
        arrival = np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))
        arrival -= arrival[0]
        sends = f"gamma arrivals at {rate:g} req/s, cv {cv:g}"
        if concurrency is not None and "rate" not in given:
            arrival = np.zeros(n)
            sends = f"{n} requests due at 0, at most {concurrency} in flight"
        if "n" not in opts and not (concurrency and "rate" not in given):
            arrival = arrival[arrival < duration]
    k = len(arrival)
    if pool is not None:
        pick = np.arange(k) % len(pool)
        prompt, output = pool.prompt_tokens[pick], pool.output_tokens[pick]
        sizes = f"lengths: the rows of {Path(pool.source).name} in order"
    elif "range_ratio" in given:
        r = spec_grammar.number(opts["range_ratio"], f"{name} range_ratio", ge=0, lt=1)
        prompt, output = (random_lengths(m, r, k, rng) for m in means)
        sizes = f"lengths uniform as vLLM's random dataset (range ratio {r:g})"
    else:
        prompt, output = (
            np.maximum(1, np.round(rng.lognormal(np.log(m) - sigma**2 / 2, sigma, size=k)))
            for m in means
        )
        sizes = f"lognormal lengths, means {means[0]:g} / {means[1]:g}"
    end = None if "n" in opts or bench or not k or arrival[-1] == 0 else duration
    about = f"synthetic ({sends}; {sizes}): {k:,} requests"
    return Workload(
        arrival, prompt.astype(np.int64), output.astype(np.int64), spec, concurrency, end, about
    )


def random_lengths(mean: float, ratio: float, k: int, rng: np.random.Generator) -> np.ndarray:
    """Token counts as `vllm bench serve --dataset-name random` samples them (RandomDataset.
    get_sampling_params, vllm-project/vllm @ 237145ea): integers uniform in
    [floor(mean x (1 - ratio)), ceil(mean x (1 + ratio))], ratio in [0, 1), at least 1 (vLLM
    also subtracts the tokenizer's special tokens from the input length; dsim has none)."""
    low = max(1, math.floor(mean * (1 - ratio)))
    high = max(low, math.ceil(mean * (1 + ratio)))
    return rng.integers(low, high + 1, size=k)


def load_workload(spec: str, seed: int = 0) -> Workload:
    """A trace path or a `synthetic:...` spec."""
    if spec_grammar.is_synthetic(spec):
        return synthetic(spec, seed)
    return load_trace(spec, seed)
