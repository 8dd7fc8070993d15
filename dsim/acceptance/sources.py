"""Acceptance sources from their command-line spelling (docs/design.md, Acceptance sources).

`iid:A`, `positions:Q1,Q2,...` (latent means, spreads 0 by default),
`preset:DRAFTER:DOMAIN[:TARGET]`, `vllm:SCRAPE` (a vLLM metrics scrape, its latent means
fitted to serve its curve), `tau:T@K` (a stated mean acceptance length, `dsim.acceptance.tau`),
`mix:SPEC=W,SPEC=W`, or the path of an acceptance-trace file. `dsim.spec_grammar` reads each
form; this module checks what the values name and builds the source.
Parametric specs take options in brackets, e.g.
`preset:dspark:chat:qwen3-4b[overconf=2,spread=1.2,spread_req=0.5,rho=0.8,noise=1]`
(docs/presets.md); `vllm:` also takes the strings `model=NAME` and `since=BEFORE_SCRAPE`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
from scipy.special import expit

from dsim import spec_grammar
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
from dsim.acceptance.tau import implied, tau_domain
from dsim.acceptance.vllm_metrics import Acceptance, read_vllm_acceptance, vllm_domain
from dsim.errors import InputError
from dsim.run_spec import MAX_COUNTS
from dsim.spec_grammar import AcceptancePart


class AcceptanceSource(Protocol):
    """What the engine asks of an acceptance model each round (see dsim.engine)."""

    gamma: int

    def bind(self, n_requests: int, rng: np.random.Generator) -> None: ...

    def draw(self, idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]: ...


_OPTIONS = {"spread", "spread_req", "overconf", "rho", "noise"}
# Logit noise wider than this makes every draft's acceptance a coin flip of 0 or 1 (and the
# fits overflow), or every confidence 0 or 1: no drafter's confidences spread so
# (docs/design.md, Input limits).
SPREADS, MAX_SPREAD = ("spread", "spread_req", "noise"), 20.0
_VLLM_OPTIONS = ("model", "since")  # string-valued, vllm: only


def _bad(spec: str, problem: str) -> InputError:
    return InputError(None, None, f"acceptance {spec!r}: {problem}")


def _options(part: AcceptancePart) -> tuple[dict[str, float], dict[str, str]]:
    """The bracket's numeric options, and the string-valued ones (`vllm:` only)."""
    spec = part.spec
    given = spec_grammar.key_values(part.options or "", f"acceptance {spec!r}")
    strings = _VLLM_OPTIONS if part.kind == "vllm" else ()
    out, text = {}, {}
    for key, value in given.items():
        if key in strings:
            if not value:
                raise _bad(spec, f"option {key!r} needs a value")
            text[key] = value
            continue
        if key not in _OPTIONS:
            raise _bad(spec, f"unknown option {key!r} (known: {sorted(_OPTIONS)})")
        bound = {"gt": 0} if key == "overconf" else {"ge": 0}
        if key in SPREADS:
            bound["le"] = MAX_SPREAD
        out[key] = spec_grammar.number(value, f"acceptance {spec!r}: {key}", **bound)
    if not 0.0 <= out.get("rho", 0.0) < 1.0:
        raise _bad(spec, "rho must lie in [0, 1)")
    return out, text


def _domain(part: AcceptancePart, gamma: int) -> tuple[DomainModel, dict[str, float]]:
    """One parametric domain: its model and the options it asked for."""
    spec, kind, rest = part.spec, part.kind, part.rest
    opts, strings = _options(part)
    body = f"{kind}:{rest}"
    if kind == "iid":
        alpha = spec_grammar.probabilities(rest, f"acceptance {spec!r}")
        if len(alpha) != 1:
            raise _bad(spec, "iid takes one probability")
        return DomainModel(body, alpha * gamma), {"spread": 0.0, "spread_req": 0.0, **opts}
    if kind == "positions":
        q = spec_grammar.probabilities(rest, f"acceptance {spec!r}")
        return DomainModel(body, q), {"spread": 0.0, "spread_req": 0.0, **opts}
    if kind == "preset":
        drafter, domain, target = spec_grammar.preset(part)
        if (drafter, domain) not in FITTED or (target or DEFAULT_TARGET) not in TARGETS:
            raise _bad(
                spec, f"unknown preset; drafters {DRAFTERS}, domains {DOMAINS}, targets {TARGETS}"
            )
        return _preset(drafter, domain, target or DEFAULT_TARGET, opts)
    if kind not in ("vllm", "tau"):
        raise _bad(
            spec,
            "expected iid:A, positions:Q1,..., preset:DRAFTER:DOMAIN, vllm:SCRAPE, tau:T@K, "
            "mix:... or a file",
        )
    o = {"spread": FIT_SPREAD, "spread_req": FIT_SPREAD_REQ, **opts}
    if kind == "tau":
        stated = spec_grammar.tau(part, MAX_COUNTS["gamma"])
        return tau_domain(stated, spec, gamma, o["spread"], o["spread_req"]), o
    model, since = strings.get("model"), strings.get("since")
    return vllm_domain(rest, gamma, o["spread"], o["spread_req"], model, since), o


def spec_files(spec: str) -> tuple[str, ...]:
    """The files an acceptance spec reads (a trace file, `vllm:` scrapes): a command that
    writes a trace must never write it over one of them."""
    parts = spec_grammar.acceptance(spec)
    return (spec,) if parts is None else tuple(p.rest for p in parts if p.kind == "vllm")


def stated_curve(spec: str) -> tuple[str, Acceptance] | None:
    """The curve a one-entry spec states, as vLLM counts it: a `vllm:` scrape's counts
    ("scrape"), or the curve a `tau:` figure implies, per round ("tau"); else None."""
    parts = spec_grammar.acceptance(spec)
    if parts is None or len(parts) != 1 or parts[0].kind not in ("vllm", "tau"):
        return None
    if parts[0].kind == "tau":
        return "tau", implied(spec_grammar.tau(parts[0], MAX_COUNTS["gamma"]))
    strings = _options(parts[0])[1]
    return "scrape", read_vllm_acceptance(parts[0].rest, strings.get("model"), strings.get("since"))


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
    parts = spec_grammar.acceptance(spec)
    if parts is not None:
        entries = [_domain(part, gamma) for part in parts]
        options = [o for _, o in entries]
        if any(o != options[0] for o in options):
            raise _bad(spec, "all mix entries must use the same options")
        weights = np.array([part.weight for part in parts])
        return ParametricAcceptance(gamma, [d for d, _ in entries], weights, **options[0])
    path = Path(spec)
    if not path.exists():
        raise _bad(spec, "not a known acceptance spec and no such file")
    from dsim.acceptance.replay import TraceAcceptance

    return TraceAcceptance(path, gamma, calibration=calibration)
