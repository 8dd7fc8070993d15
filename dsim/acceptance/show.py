"""`dsim acceptance show`: what dsim reads from an acceptance spec and what it then serves.

For a `vllm:` scrape (its counters), a `tau:T@K` figure (the curve it implies under an assumed
shape, `dsim.acceptance.tau`) or an acceptance trace (its recorded rounds), the conditional and
unconditional curves read and the tau they give at each gamma (1 + the first gamma prefix
survivals); for every spec, the curve
and tau a simulation serves at full verification (`dsim.acceptance.measure.served_curve`), so
the two can be compared position by position, with each simulated figure's binomial standard
error; and the confidences' discrimination per position (`dsim.acceptance.discrimination`:
AUC, bias, ECE), simulated and, for a trace, recorded.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

from dsim import spec_grammar
from dsim.acceptance.discrimination import discrimination
from dsim.acceptance.measure import served_curve, served_rounds, summarize
from dsim.acceptance.parametric import ParametricAcceptance
from dsim.acceptance.presets import PRESET_GAMMA, SPREAD_EVIDENCE
from dsim.acceptance.sources import parse_acceptance, stated_curve
from dsim.acceptance.tau import SHAPE
from dsim.acceptance.trace import conf_columns, read_acceptance_trace, trace_gamma
from dsim.acceptance.vllm_metrics import Acceptance
from dsim.checks import check_number
from dsim.errors import InputError, Notice
from dsim.run_spec import MAX_COUNTS


def _recorded(spec: str) -> tuple[str, Acceptance] | None:
    """The counts a spec states, as vLLM counts them: a single scrape's, the curve a `tau:`
    figure implies, or the rounds of an acceptance trace (each a draft of the trace's gamma);
    None for a model."""
    if spec_grammar.acceptance(spec) is not None:
        return stated_curve(spec)
    if not Path(spec).is_file():
        return None  # parse_acceptance says what is wrong with it
    df, _ = read_acceptance_trace(spec)
    accepted = df["accepted"].to_numpy()
    per_position = (accepted[:, None] >= np.arange(1, trace_gamma(df) + 1)).sum(axis=0)
    rounds = float(len(df))
    return "trace", Acceptance(
        rounds, rounds * trace_gamma(df), float(accepted.sum()), per_position
    )


def _read(kind: str, acc: Acceptance, gamma: int) -> dict[str, Any]:
    """The curves read; positions no round reached have no conditional figure (None)."""
    unconditional = acc.unconditional[:gamma]
    conditional = [
        float(c) if k < acc.reached else None for k, c in enumerate(acc.conditional[:gamma])
    ]
    shape = {"shape": SHAPE, "alpha": float(acc.conditional[0])} if kind == "tau" else {}
    return {
        "kind": kind,
        **shape,
        "drafts": acc.drafts,
        "positions": len(acc.per_position),
        "reached": acc.reached,
        "conditional": conditional,
        "unconditional": unconditional.tolist(),
        "tau": (1.0 + np.cumsum(unconditional)).tolist(),
    }


def _recorded_discrimination(spec: str, gamma: int) -> list[dict[str, Any]] | None:
    """A trace's own confidences against its own outcomes (None for a spec that is no trace)."""
    if spec_grammar.acceptance(spec) is not None or not Path(spec).is_file():
        return None
    df, _ = read_acceptance_trace(spec)
    g = min(gamma, trace_gamma(df))
    conf = df[conf_columns(trace_gamma(df))].to_numpy()[:, :g]
    return discrimination(conf, np.minimum(df["accepted"].to_numpy(), g))


def _evidence(spec: str) -> str:
    """Where a parametric spec's spreads and noise come from."""
    parts = spec_grammar.acceptance(spec) or []
    if not any(p.kind in ("preset", "vllm", "tau") for p in parts):
        return "as the spec gives them (unset: 0)"
    given = any(p.options for p in parts)
    return f"as the spec gives them where set, else {SPREAD_EVIDENCE}" if given else SPREAD_EVIDENCE


def _model(spec: str, source: Any) -> dict[str, Any] | None:
    """Spreads, confidence options, their evidence and, for one parametric domain, its latent
    means (as probabilities)."""
    if not isinstance(source, ParametricAcceptance):
        return None
    out: dict[str, Any] = {
        "spread": source.spread,
        "spread_req": source.spread_req,
        "rho": source.rho,
        "overconf": source.overconf,
        "noise": source.noise,
        "evidence": _evidence(spec),
    }
    if len(source.domains) == 1:
        out["latent"] = expit(source.latent[0]).tolist()
    return out


def acceptance_report(
    spec: str, gamma: int | None, requests: int = 2000, tokens: int = 300, seed: int = 0
) -> dict[str, Any]:
    """The figures `dsim acceptance show` prints: read (scrapes only), model, simulated."""
    for name, value in (("--requests", requests), ("--tokens", tokens)):
        if value < 1:
            raise InputError(None, None, f"{name} must be at least 1, got {value}")
    recorded = _recorded(spec)
    if gamma is None:
        gamma = len(recorded[1].per_position) if recorded is not None else PRESET_GAMMA
    check_number(gamma, "--gamma", ge=1, le=MAX_COUNTS["gamma"], integer=True)
    with warnings.catch_warnings():  # the report says it itself
        warnings.simplefilter("ignore", Notice)
        sources = [parse_acceptance(spec, g) for g in range(1, gamma + 1)]
    served = [served_curve(s, requests, tokens, np.random.default_rng(seed)) for s in sources[:-1]]
    rounds = served_rounds(sources[-1], requests, tokens, np.random.default_rng(seed))
    served.append(summarize(rounds.accepted, gamma))
    curve, reached = served[-1].curve, served[-1].reached
    se = np.sqrt(curve * (1 - curve) / np.maximum(reached, 1))
    return {
        "spec": spec,
        "gamma": gamma,
        "read": None if recorded is None else _read(*recorded, gamma),
        "model": _model(spec, sources[-1]),
        "simulated": {
            "requests": requests,
            "tokens": tokens,
            "seed": seed,
            "conditional": [float(c) if n else None for c, n in zip(curve, reached, strict=True)],
            "se": [float(e) if n else None for e, n in zip(se, reached, strict=True)],
            "rounds_reaching": reached.astype(int).tolist(),
            "tau": [s.tau for s in served],
        },
        "discrimination": {
            "simulated": discrimination(rounds.conf, rounds.accepted),
            "read": _recorded_discrimination(spec, gamma),
        },
    }
