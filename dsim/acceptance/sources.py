"""Acceptance sources from their command-line spelling (docs/design.md, Acceptance sources).

`iid:A`, `positions:Q1,Q2,...`, `preset:DRAFTER:DOMAIN[:TARGET]`, `vllm:SCRAPE` (a vLLM metrics
scrape), `mix:SPEC=W,SPEC=W`, or the path of an acceptance-trace file. Parametric specs take
options in brackets, e.g.
`preset:dspark:chat:qwen3-4b[overconf=2,spread=1.2,spread_req=0.5,rho=0.8]`
(docs/presets.md); `vllm:` also takes the strings `model=NAME` and `since=BEFORE_SCRAPE`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

import numpy as np
from scipy.special import expit

from dsim.acceptance.parametric import DomainModel, ParametricAcceptance, fit_shift
from dsim.acceptance.presets import (
    DEFAULT_TARGET,
    DOMAINS,
    DRAFTERS,
    FIT_SPREAD,
    FIT_SPREAD_REQ,
    FITTED,
    TABLE1,
    TARGETS,
)
from dsim.acceptance.vllm_metrics import vllm_domain
from dsim.checks import parse_number
from dsim.errors import InputError


class AcceptanceSource(Protocol):
    """What the engine asks of an acceptance model each round (see dsim.engine)."""

    gamma: int

    def bind(self, n_requests: int, rng: np.random.Generator) -> None: ...

    def draw(self, idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]: ...


_OPTIONS = {"spread", "spread_req", "overconf", "rho"}
_VLLM_OPTIONS = ("model", "since")  # string-valued, vllm: only
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


def _string_options(spec: str, text: str | None, keys: tuple[str, ...]) -> tuple[dict, str]:
    """Take the string-valued options `keys` out of a bracket; the rest stays for _options."""
    strings, rest = {}, []
    for part in filter(None, (text or "").split(",")):
        key, _, value = part.partition("=")
        if key.strip() in keys:
            if not value.strip():
                raise _bad(spec, f"option {key.strip()!r} needs a value")
            strings[key.strip()] = value.strip()
        else:
            rest.append(part)
    return strings, ",".join(rest)


def _options(spec: str, text: str | None) -> dict[str, float]:
    out = {}
    for part in filter(None, (text or "").split(",")):
        key, _, value = part.partition("=")
        if key.strip() not in _OPTIONS:
            raise _bad(spec, f"unknown option {key.strip()!r} (known: {sorted(_OPTIONS)})")
        bound = {"gt": 0} if key.strip() == "overconf" else {"ge": 0}
        out[key.strip()] = parse_number(value, f"acceptance {spec!r}: {key.strip()}", **bound)
    if not 0.0 <= out.get("rho", 0.0) < 1.0:
        raise _bad(spec, "rho must lie in [0, 1)")
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
    body, text = m["body"], m["opts"]
    kind, _, rest = body.partition(":")
    strings, text = _string_options(spec, text, _VLLM_OPTIONS if kind == "vllm" else ())
    opts = _options(spec, text)
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
        drafter, _, rest = rest.partition(":")
        domain, _, target = rest.partition(":")
        if (drafter, domain) not in FITTED or (target or DEFAULT_TARGET) not in TARGETS:
            raise _bad(
                spec, f"unknown preset; drafters {DRAFTERS}, domains {DOMAINS}, targets {TARGETS}"
            )
        return _preset(drafter, domain, target or DEFAULT_TARGET, opts)
    if kind == "vllm":
        o = {"spread": FIT_SPREAD, "spread_req": FIT_SPREAD_REQ, **opts}
        model, since = strings.get("model"), strings.get("since")
        return vllm_domain(rest, gamma, o["spread"], o["spread_req"], model, since), o
    raise _bad(
        spec,
        "expected iid:A, positions:Q1,..., preset:DRAFTER:DOMAIN, vllm:SCRAPE, mix:... or a file",
    )


def _preset(
    drafter: str, domain: str, target: str, opts: dict[str, float]
) -> tuple[DomainModel, dict[str, float]]:
    """The fitted Qwen3-4B latent means at the target's level. At spreads other than the fitted
    ones the level is refitted (one logit shift, so tau still matches Table 1; the curve's shape
    then only approximately matches the paper's)."""
    latent, shifts = FITTED[drafter, domain]
    q = tuple(float(x) for x in expit(latent))
    o = {"spread": FIT_SPREAD, "spread_req": FIT_SPREAD_REQ, **opts}
    if (o["spread"], o["spread_req"]) == (FIT_SPREAD, FIT_SPREAD_REQ):
        shift = shifts[target]
    else:
        shift = fit_shift(q, TABLE1[target, drafter, domain], o["spread"], o["spread_req"])
    return DomainModel(domain, q, shift), o


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
    if spec.split(":")[0] in ("iid", "positions", "preset", "vllm"):
        model, options = _domain(spec, gamma)
        return ParametricAcceptance(gamma, [model], np.ones(1), **options)
    path = Path(spec)
    if not path.exists():
        raise _bad(spec, "not a known acceptance spec and no such file")
    from dsim.acceptance.replay import TraceAcceptance

    return TraceAcceptance(path, gamma, calibration=calibration)
