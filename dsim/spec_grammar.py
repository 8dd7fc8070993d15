"""The one reader of dsim's small spec formats: `k=v,k=v`, number lists, `P:D`, `START:END`,
`NAME:ARG`, bracketed options and the formats built from them (draft and scheduling costs,
synthetic-trace specs, and every acceptance form: `iid:A`, `positions:Q1,..`,
`preset:DRAFTER:DOMAIN[:TARGET]`, `vllm:SCRAPE`, `tau:T@K`, `mix:SPEC=W,..` and their
`[options]`).

Every reader returns plain typed values and leaves building objects to the layer that owns
them (the engine builds its cost models, `dsim.acceptance` its sources, `dsim.workload` its
arrivals), so this module imports nothing of the simulator. What a value means stays with its
owner: the grammar reads a preset's three names, `dsim.acceptance.sources` knows which presets
exist and which options an acceptance spec takes (and their ranges). One error contract: an
`InputError` whose message starts with what was being read (`--window '5:x': END ...`,
`trace spec 'synthetic:...': ...`) and says what was expected. Callers go through the module
(`spec_grammar.window(...)`), so a test can count how often each field is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsim.checks import check_number
from dsim.errors import InputError


def _fail(problem: str) -> InputError:
    return InputError(None, None, problem)


def number(text: str, name: str, *, integer: bool = False, **bounds: float) -> float:
    """A number written in a spec string (`rate=4`), checked like `check_number`."""
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise _fail(f"{name} must be {kind}, got {text!r}") from None
    return check_number(value, name, integer=integer, **bounds)


def _split(text: str, brackets: bool) -> list[str]:
    """Split on commas outside double quotes (and, with `brackets`, outside [...])."""
    parts, depth, cur, quoted, escaped = [], 0, "", False, False
    for ch in text:
        if quoted:
            quoted, escaped = (escaped or ch != '"'), (not escaped and ch == "\\")
        elif ch == '"':
            quoted = True
        elif brackets:
            depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0 and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def split_top(text: str) -> list[str]:
    """Split on commas outside brackets and quotes (entries may carry bracketed options)."""
    return _split(text, brackets=True)


def _unquote(value: str) -> str:
    """`"a,b"` -> `a,b` (inside quotes, `\\"` is a quote and `\\\\` a backslash); else as is."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def key_values(text: str, where: str, expected: str = "key=value") -> dict[str, str]:
    """`k=v,k=v` -> {k: v} (keys and values stripped, empty parts skipped; a value in double
    quotes may hold commas and brackets: `model="a,b"`); a part without `=` is `{where}:
    expected {expected}, got {part!r}`, and a key given twice is refused (which one was meant
    is not for dsim to guess)."""
    out: dict[str, str] = {}
    for part in filter(None, _split(text, brackets=False)):
        key, sep, value = part.partition("=")
        if not sep:
            raise _fail(f"{where}: expected {expected}, got {part!r}")
        if key.strip() in out:
            raise _fail(f"{where}: {key.strip()} given twice; give it once")
        out[key.strip()] = _unquote(value.strip())
    return out


def items(text: str) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c"): a comma list, blanks dropped."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def ints(text: str, option: str, minimum: int = 1) -> tuple[int, ...]:
    """`2,15,30` -> (2, 15, 30): whole numbers >= `minimum`, in the order given."""
    values = []
    for item in (x.strip() for x in text.split(",")):
        try:
            value = int(item)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            kind = {1: "positive", 0: "non-negative"}.get(minimum, f">= {minimum}")
            raise _fail(f"{option}: {item!r} is not a {kind} integer")
        values.append(value)
    return tuple(values)


def probabilities(text: str, where: str) -> tuple[float, ...]:
    """`0.9,0.8` -> (0.9, 0.8), each in [0, 1]."""
    try:
        q = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise _fail(f"{where}: expected numbers, got {text!r}") from None
    if not q or not all(0.0 <= x <= 1.0 for x in q):
        raise _fail(f"{where}: acceptance probabilities must lie in [0, 1]")
    return q


def name_arg(text: str) -> tuple[str, str]:
    """`fixed:3` -> ("fixed", "3"); `dspark` -> ("dspark", "")."""
    kind, _, arg = text.partition(":")
    return kind, arg


def pair(text: str, option: str) -> tuple[int, int]:
    """`P:D` -> (P, D), each a whole number >= 1 (`--disagg`)."""
    parts = text.split(":")
    digits = all(re.fullmatch(r"[0-9]+", x.strip()) for x in parts)  # not `1_0`, not `1e3`
    counts = tuple(int(x) for x in parts) if digits else ()
    if len(counts) != 2:
        raise _fail(f"{option} {text!r}: expected P:D (two whole numbers)")
    if min(counts) < 1:
        raise _fail(f"{option} {text!r}: needs at least 1 prefill and 1 decode")
    return counts


def window(text: str) -> tuple[float, float | None]:
    """`START:END` seconds (`--window`); END may be left out (to the trace's end)."""
    start, _, end = text.partition(":")
    lo = number(start or "0", f"--window {text!r}: START", ge=0)
    return lo, (number(end, f"--window {text!r}: END", gt=lo) if end else None)


@dataclass(frozen=True)
class DraftCostSpec:
    """`--draft-cost`: no cost, `ratio` times the target's step, or a drafter profile CSV."""

    ratio: float = 0.0
    profile: str | None = None


# A drafter pass dearer than the target's step is warned about (`run_inputs.spec_warnings`);
# above this many target steps it is no drafter at all (docs/design.md, Input limits).
MAX_DRAFT_RATIO = 100.0


def draft_cost(text: str) -> DraftCostSpec:
    """`0`, `ratio:X` (0 <= X <= MAX_DRAFT_RATIO) or the path of a drafter profile CSV."""
    if text.strip() == "0":
        return DraftCostSpec()
    if text.startswith("ratio:"):
        name = f"--draft-cost {text!r}: ratio"
        return DraftCostSpec(ratio=number(text[6:], name, ge=0, le=MAX_DRAFT_RATIO))
    return DraftCostSpec(profile=text)


@dataclass(frozen=True)
class SchedCostSpec:
    """`--sched-cost`: `factor` times the measured default (`auto`, `auto:F`), or `seconds`."""

    factor: float | None = 1.0
    seconds: float = 0.0


# A scheduler this many times the measured one, or a second a round, is no serving engine's.
MAX_SCHED_FACTOR, MAX_SCHED_S = 100.0, 1.0


def sched_cost(text: str) -> SchedCostSpec:
    """`auto` (the measured default), `auto:F` (0 <= F <= 100 times it) or a constant in
    SECONDS (0..1)."""
    kind, factor = name_arg(text)
    try:
        if kind == "auto":
            f = float(factor) if factor else 1.0
            if 0 <= f <= MAX_SCHED_FACTOR:  # NaN fails both
                return SchedCostSpec(factor=f)
        elif not factor and 0 <= float(text) <= MAX_SCHED_S:
            return SchedCostSpec(factor=None, seconds=float(text))
    except ValueError:
        pass
    raise _fail(
        f"--sched-cost {text!r}: expected auto, auto:F (F in 0..{MAX_SCHED_FACTOR:g}) or SECONDS "
        f"in 0..{MAX_SCHED_S:g}"
    )


_OPTIONS_RE = re.compile(r'^(?P<body>.*?)(\[(?P<opts>(?:[^\]"]|"(?:[^"\\]|\\.)*")*)\])?$')


@dataclass(frozen=True)
class AcceptancePart:
    """One parametric acceptance domain: `KIND:REST[options]`, with its mix weight."""

    spec: str  # as written, for error messages
    kind: str  # one of PARAMETRIC
    rest: str  # what follows `KIND:`, options removed
    options: str | None  # the bracket's text, or None without one
    weight: float = 1.0


PARAMETRIC = ("iid", "positions", "preset", "vllm", "tau")


def acceptance(text: str) -> tuple[AcceptancePart, ...] | None:
    """A parametric acceptance spec (one domain, or `mix:SPEC=W,SPEC=W`) as its parts; None
    for anything else (the path of an acceptance-trace file)."""
    if text.startswith("mix:"):
        parts = []
        for entry in split_top(text[4:]):
            sub, sep, weight = entry.rpartition("=")
            if not sep:
                problem = f"mix entry {entry!r} needs a positive weight: SPEC=W"
                raise _fail(f"acceptance {text!r}: {problem}")
            w = number(weight, f"acceptance {text!r}: weight of {sub!r}", gt=0)
            if any(p.spec.strip() == sub.strip() for p in parts):
                problem = f"{sub.strip()} given twice; give it once, with its whole weight"
                raise _fail(f"acceptance {text!r}: {problem}")
            parts.append(_part(sub, w))
        return tuple(parts)
    if name_arg(text)[0] in PARAMETRIC:
        return (_part(text, 1.0),)
    return None


def _part(text: str, weight: float) -> AcceptancePart:
    m = _OPTIONS_RE.match(text.strip())
    kind, rest = name_arg(m["body"])
    return AcceptancePart(text, kind, rest, m["opts"], weight)


def preset(part: AcceptancePart) -> tuple[str, str, str | None]:
    """`preset:DRAFTER:DOMAIN[:TARGET]` -> (DRAFTER, DOMAIN, TARGET or None)."""
    names = part.rest.split(":")
    if not 2 <= len(names) <= 3 or not all(names):
        raise _fail(f"acceptance {part.spec!r}: expected preset:DRAFTER:DOMAIN[:TARGET]")
    return names[0], names[1], (names[2] if len(names) == 3 else None)


TAU_FORM = "tau:T@K (T tokens per verify round, bonus included, at K drafts a round)"


@dataclass(frozen=True)
class TauSpec:
    """`tau:T@K`: a mean acceptance length T (1 + accepted drafts / rounds) at K drafts."""

    tau: float
    drafts: int


def tau(part: AcceptancePart, max_drafts: int) -> TauSpec:
    """`T@K`: K a whole number in 1..max_drafts, 1 < T <= K + 1."""
    where = f"acceptance {part.spec!r}"
    value, sep, drafts = part.rest.partition("@")
    if not sep:
        raise _fail(f"{where}: no @K; expected {TAU_FORM}")
    k = int(number(drafts, f"{where}: K", integer=True, ge=1, le=max_drafts))
    t = number(value, f"{where}: T")
    if t <= 1:
        problem = "T counts the bonus token, so T = 1 is no draft ever accepted"
        raise _fail(f"{where}: T must exceed 1, got {value}: {problem}")
    if t > k + 1:
        raise _fail(
            f"{where}: T must be at most K + 1 = {k + 1} (every draft accepted), got {value}"
        )
    return TauSpec(t, k)


def is_synthetic(trace: str) -> bool:
    """`synthetic` or `synthetic:k=v,...`: a generated trace. A file whose name only starts
    with the word (`synthetic_traffic.csv`) is a file, read as one."""
    return trace == "synthetic" or trace.startswith("synthetic:")


def synthetic(text: str, known: tuple[str, ...]) -> dict[str, str]:
    """`synthetic:k=v,...` -> the keys given (the caller adds its defaults); a key not in
    `known` is refused."""
    given = key_values(name_arg(text)[1], f"trace spec {text!r}")
    unknown = set(given) - set(known)
    if unknown:
        raise _fail(f"trace spec {text!r}: unknown key(s) {sorted(unknown)}")
    return given


def with_rate(trace: str, qps: float) -> str:
    """`--qps X`: the synthetic trace spec `trace` with `rate=X` (req/s) added; a file trace,
    or a spec that gives its own rate, is refused with the option to use instead."""
    if not is_synthetic(trace):
        raise _fail(
            f"--qps sets a synthetic trace's rate; --trace {trace!r} is a file: scale its load "
            "with --rate-scale (the summary's arrival rate is in req/s)"
        )
    body = name_arg(trace)[1]
    given = key_values(body, f"trace spec {trace!r}")
    if "rate" in given:
        raise _fail(f"--qps and the trace spec's rate={given['rate']} both set the rate: give one")
    rate = str(int(qps)) if float(qps).is_integer() else repr(float(qps))
    return f"synthetic:{body},rate={rate}" if body else f"synthetic:rate={rate}"


TIME_UNITS = ("s", "ms", "us", "iso")  # a trace's timestamp column: seconds, ms, us, ISO dates


@dataclass(frozen=True)
class TraceMapping:
    """`FILE[timestamp=COL:UNIT,prompt=COL,output=COL]`: which columns of a CSV/JSONL hold a
    request's send time (and its unit), prompt tokens and output tokens."""

    timestamp: str
    unit: str
    prompt: str
    output: str

    def columns(self) -> tuple[str, str, str]:
        return self.timestamp, self.prompt, self.output


MAPPING_FORM = "FILE[timestamp=COL:s|ms|us|iso,prompt=COL,output=COL]"


def trace_file(text: str) -> tuple[str, TraceMapping | None]:
    """`--trace FILE` or `FILE[mapping]` -> (FILE, its column mapping or None)."""
    m = _OPTIONS_RE.match(text.strip())
    if m["opts"] is None:
        return text, None
    where = f"--trace {text!r}"
    given = key_values(m["opts"], where)
    keys = ("timestamp", "prompt", "output")
    unknown, missing = set(given) - set(keys), [k for k in keys if not given.get(k)]
    if unknown or missing:
        problem = f"unknown key(s) {sorted(unknown)}" if unknown else f"no {missing[0]}="
        raise _fail(f"{where}: {problem}; expected {MAPPING_FORM}")
    column, sep, unit = given["timestamp"].rpartition(":")
    if not sep or unit not in TIME_UNITS:
        problem = f"unknown timestamp unit {unit!r}" if sep else "the timestamp has no unit"
        raise _fail(
            f"{where}: {problem}; write timestamp=COL:UNIT, UNIT one of {', '.join(TIME_UNITS)}"
        )
    return m["body"], TraceMapping(column, unit, given["prompt"], given["output"])
