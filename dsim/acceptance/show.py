"""`dsim acceptance show`: what dsim reads from an acceptance spec and what it then serves.

For a `vllm:` scrape, the conditional and unconditional curves read from its counters and the
tau they give at each gamma (1 + the first gamma prefix survivals); for every spec, the curve
and tau a simulation serves at full verification (`dsim.acceptance.measure.served_curve`), so
the two can be compared position by position, with each simulated figure's binomial standard
error.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy.special import expit

from dsim.acceptance.measure import served_curve
from dsim.acceptance.parametric import ParametricAcceptance
from dsim.acceptance.presets import PRESET_GAMMA
from dsim.acceptance.sources import parse_acceptance, scrape_read
from dsim.acceptance.vllm_metrics import Acceptance
from dsim.errors import InputError, Notice


def _read(acc: Acceptance, gamma: int) -> dict[str, Any]:
    """The scrape's curves; positions no round reached have no conditional figure (None)."""
    unconditional = acc.unconditional[:gamma]
    conditional = [
        float(c) if k < acc.reached else None for k, c in enumerate(acc.conditional[:gamma])
    ]
    return {
        "drafts": acc.drafts,
        "positions": len(acc.per_position),
        "reached": acc.reached,
        "conditional": conditional,
        "unconditional": unconditional.tolist(),
        "tau": (1.0 + np.cumsum(unconditional)).tolist(),
    }


def _model(source: Any) -> dict[str, Any] | None:
    """Spreads and, for one parametric domain, its latent means (as probabilities)."""
    if not isinstance(source, ParametricAcceptance):
        return None
    out: dict[str, Any] = {"spread": source.spread, "spread_req": source.spread_req}
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
    acc = scrape_read(spec)
    if gamma is None:
        gamma = len(acc.per_position) if acc is not None else PRESET_GAMMA
    if gamma < 1:
        raise InputError(None, None, f"--gamma must be at least 1, got {gamma}")
    with warnings.catch_warnings():  # the report says it itself
        warnings.simplefilter("ignore", Notice)
        sources = [parse_acceptance(spec, g) for g in range(1, gamma + 1)]
    served = [served_curve(s, requests, tokens, np.random.default_rng(seed)) for s in sources]
    curve, reached = served[-1].curve, served[-1].reached
    se = np.sqrt(curve * (1 - curve) / np.maximum(reached, 1))
    return {
        "spec": spec,
        "gamma": gamma,
        "read": None if acc is None else _read(acc, gamma),
        "model": _model(sources[-1]),
        "simulated": {
            "requests": requests,
            "tokens": tokens,
            "seed": seed,
            "conditional": [float(c) if n else None for c, n in zip(curve, reached, strict=True)],
            "se": [float(e) if n else None for e, n in zip(se, reached, strict=True)],
            "rounds_reaching": reached.astype(int).tolist(),
            "tau": [s.tau for s in served],
        },
    }
