"""Acceptance sources from their command-line spelling (DESIGN.md 8).

`iid:A`, `positions:Q1,Q2,...`, `preset:DRAFTER:DOMAIN`, `mix:SPEC=W,SPEC=W`, or the path of an
acceptance-trace file. Parametric specs take options in brackets, e.g.
`preset:dspark:chat[overconf=2,spread=1.2,spread_req=0.5]`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

import numpy as np

from dsim.acceptance.parametric import DomainModel, ParametricAcceptance, fit_shift
from dsim.acceptance.presets import DOMAINS, DRAFTERS, PRESET_GAMMA, PRESETS
from dsim.checks import parse_number
from dsim.errors import InputError


class AcceptanceSource(Protocol):
    """What the engine asks of an acceptance model each round (see dsim.engine)."""

    gamma: int

    def bind(self, n_requests: int, rng: np.random.Generator) -> None: ...

    def draw(self, idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]: ...


_OPTIONS = {"spread", "spread_req", "overconf"}
_OPT_RE = re.compile(r"^(?P<body>.*?)(\[(?P<opts>[^\]]*)\])?$")


def _bad(spec: str, problem: str) -> InputError:
    return InputError(None, None, f"acceptance {spec!r}: {problem}")


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets (mix entries may carry bracketed options)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def _options(spec: str, text: str | None) -> dict[str, float]:
    out = {}
    for part in filter(None, (text or "").split(",")):
        key, _, value = part.partition("=")
        if key.strip() not in _OPTIONS:
            raise _bad(spec, f"unknown option {key.strip()!r} (known: {sorted(_OPTIONS)})")
        bound = {"gt": 0} if key.strip() == "overconf" else {"ge": 0}
        out[key.strip()] = parse_number(value, f"acceptance {spec!r}: {key.strip()}", **bound)
    return out


def _probabilities(spec: str, text: str) -> tuple[float, ...]:
    try:
        q = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise _bad(spec, f"expected numbers, got {text!r}") from None
    if not q or not all(0.0 <= x <= 1.0 for x in q):
        raise _bad(spec, "acceptance probabilities must lie in [0, 1]")
    return q


def _domain(spec: str, gamma: int) -> tuple[DomainModel, dict[str, float]]:
    """One parametric domain: its model and the options it asked for."""
    m = _OPT_RE.match(spec.strip())
    body, opts = m["body"], _options(spec, m["opts"])
    kind, _, rest = body.partition(":")
    if kind == "iid":
        alpha = _probabilities(spec, rest)
        if len(alpha) != 1:
            raise _bad(spec, "iid takes one probability")
        return DomainModel(body, alpha * gamma), {"spread": 0.0, "spread_req": 0.0, **opts}
    if kind == "positions":
        return DomainModel(body, _probabilities(spec, rest)), {
            "spread": 0.0,
            "spread_req": 0.0,
            **opts,
        }
    if kind == "preset":
        drafter, _, domain = rest.partition(":")
        if (drafter, domain) not in PRESETS:
            raise _bad(spec, f"unknown preset; drafters {DRAFTERS}, domains {DOMAINS}")
        tau, shape = PRESETS[drafter, domain]
        o = {"spread": 1.0, "spread_req": 0.5, **opts}
        shift = fit_shift(shape[:PRESET_GAMMA], tau, o["spread"], o["spread_req"])
        return DomainModel(domain, shape, shift), o
    raise _bad(spec, "expected iid:A, positions:Q1,..., preset:DRAFTER:DOMAIN, mix:... or a file")


def parse_acceptance(
    spec: str, gamma: int, calibration: str | Path | None = None
) -> AcceptanceSource:
    """Build the acceptance source named by `spec` for blocks of `gamma` drafts."""
    if gamma < 1:
        raise InputError(None, None, f"gamma must be >= 1, got {gamma}")
    if calibration is not None and Path(spec).suffix != ".parquet":
        raise _bad(spec, "--calibration applies to acceptance-trace files only")
    if spec.startswith("mix:"):
        entries = []
        for part in _split_top(spec[4:]):
            sub, sep, weight = part.rpartition("=")
            if not sep:
                raise _bad(spec, f"mix entry {part!r} needs a positive weight: SPEC=W")
            w = parse_number(weight, f"acceptance {spec!r}: weight of {sub!r}", gt=0)
            entries.append((*_domain(sub, gamma), w))
        options = [o for _, o, _ in entries]
        if any(o != options[0] for o in options):
            raise _bad(spec, "all mix entries must use the same options")
        models, weights = [d for d, _, _ in entries], [w for _, _, w in entries]
        return ParametricAcceptance(gamma, models, np.array(weights), **options[0])
    if spec.split(":")[0] in ("iid", "positions", "preset"):
        model, options = _domain(spec, gamma)
        return ParametricAcceptance(gamma, [model], np.ones(1), **options)
    path = Path(spec)
    if not path.exists():
        raise _bad(spec, "not a known acceptance spec and no such file")
    from dsim.acceptance.replay import TraceAcceptance

    return TraceAcceptance(path, gamma, calibration=calibration)
