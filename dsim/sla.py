"""Tail SLAs: bounds on a run's latency percentiles and per-user speed, read once from
`dsim run --sla KEY=VALUE` or a sweep's `[sla]` table, and judged against a summary.

A key is a summary field: `{ttft,tpot,itl,e2el}_p{50,90,99}_s` is an upper bound in seconds
(TTFT; TPOT without the first token; ITL per streamed chunk, i.e. per round under
speculation; end-to-end latency), `tps_p{1,10,50}` a lower bound in tok/s on the per-user
speed that all but 1, 10 or 50% of the requests reach (docs/pareto.md, Tail SLAs).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dsim import spec_grammar
from dsim.checks import check_number
from dsim.errors import InputError
from dsim.metrics import PCTS

LATENCIES = ("ttft", "tpot", "itl", "e2el")
SPEED_PCTS = (1, 10, 50)
KEYS = (
    *(f"{m}_p{q}_s" for m in LATENCIES for q in PCTS),
    *(f"tps_p{q}" for q in SPEED_PCTS),
)
USAGE = (
    f"{'|'.join(LATENCIES)}_p{{{','.join(map(str, PCTS))}}}_s=SECONDS (at most) or "
    f"tps_p{{{','.join(map(str, SPEED_PCTS))}}}=TOK_S (at least)"
)


@dataclass(frozen=True)
class Bound:
    key: str  # the summary field it bounds
    limit: float

    @property
    def at_least(self) -> bool:
        return self.key.startswith("tps_")

    def met(self, value: float) -> bool:
        """Whether `value` keeps the bound (a NaN, no requests to measure, does not)."""
        if math.isnan(value):
            return False
        return value >= self.limit if self.at_least else value <= self.limit

    def __str__(self) -> str:
        return f"{self.key} {'>=' if self.at_least else '<='} {self.limit:g}"


@dataclass(frozen=True)
class Sla:
    bounds: tuple[Bound, ...] = ()

    def verdicts(self, summary: dict) -> list[dict]:
        """Each bound with the run's value and whether it was met (summary.json's `sla`)."""
        return [
            {"key": b.key, "bound": b.limit, "value": float(summary[b.key]),
             "met": b.met(float(summary[b.key]))}
            for b in self.bounds
        ]  # fmt: skip

    def missed(self, summary) -> list[str]:
        """The bounds `summary` (a dict or a points row) misses, as `ttft_p99_s > 2`."""
        return [
            f"{b.key} {'<' if b.at_least else '>'} {b.limit:g}"
            for b in self.bounds
            if not b.met(float(summary[b.key]))
        ]


def check_key(key: str) -> None:
    """An unknown metric or percentile, or a known one with the wrong unit suffix: one line
    naming what is known (and the key meant, where one is)."""
    if key in KEYS:
        return
    m = re.fullmatch(r"([a-z0-9]+)_p([0-9.]+)(_[a-z]+)?", key)
    metrics = (*LATENCIES, "tps")
    if m is None or m[1] not in metrics:
        problem = f"unknown SLA metric {key!r}"
    elif (meant := f"{m[1]}_p{m[2]}" + ("" if m[1] == "tps" else "_s")) in KEYS:
        unit = "tok/s, no suffix" if m[1] == "tps" else "seconds, suffix _s"
        problem = f"{key!r} has the wrong unit ({unit}): did you mean {meant!r}?"
    else:
        problem = f"unknown percentile p{m[2]} in {key!r}"
    raise InputError(None, None, f"{problem}; expected {USAGE}")


def read(pairs: Iterable[tuple[str, object]]) -> Sla:
    """(key, bound) pairs -> an Sla; a key given twice, unknown, or a bound that is not a
    positive finite number is an InputError."""
    bounds, seen = [], set()
    for key, value in pairs:
        check_key(key)
        if key in seen:
            raise InputError(None, None, f"SLA {key} given twice; give each once")
        seen.add(key)
        bounds.append(Bound(key, check_number(value, f"SLA {key}", gt=0)))
    return Sla(tuple(bounds))


def parse_options(texts: Iterable[str]) -> Sla:
    """`--sla KEY=VALUE` options, each read as one bound."""
    pairs = []
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep:
            raise InputError(None, None, f"--sla {text!r}: expected KEY=VALUE, {USAGE}")
        check_key(key.strip())
        if "," in value:
            raise InputError(
                None, None, f"--sla {text!r}: one bound per --sla; repeat the option for more"
            )
        pairs.append((key.strip(), spec_grammar.number(value, f"--sla {text!r}: bound", gt=0)))
    return read(pairs)
