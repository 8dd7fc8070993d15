"""`tau:T@K`: the acceptance a stated mean acceptance length implies (docs/acceptance-trace.md,
Stated mean acceptance length).

T is tokens per verify round, the bonus token included, measured at K drafts a round: vLLM's
"mean acceptance length", 1 + num_accepted_tokens / num_drafts (vllm/v1/spec_decode/metrics.py,
SpecDecodingProm), and SGLang's "accept len" (`sglang:spec_accept_length`: each verified request
adds its accepted drafts + 1, divided by the requests verified). One figure fixes one
parameter, so the shape is assumed: geometric (Leviathan et al. 2023), every draft accepted with
the same conditional probability alpha, so draft k survives with alpha^k and
T = 1 + alpha + ... + alpha^K, which rises with alpha (solved on [0, 1] by Brent's bracketing
method). That curve is served as a scrape's is: latent means fitted so that the conditional
curve a run serves at full verification is alpha at every position, at the presets' spreads
unless given (assumed: a stated tau has no per-request figures).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from dsim.acceptance.parametric import DomainModel, serving_latent
from dsim.acceptance.vllm_metrics import Acceptance
from dsim.errors import InputError
from dsim.spec_grammar import TauSpec

SHAPE = "geometric: every draft accepted with the same probability alpha (draft k survives alpha^k)"


def mean_length(alpha: float, drafts: int) -> float:
    """Tokens per round, bonus included, when every draft is accepted with `alpha`."""
    return 1.0 + float(np.sum(alpha ** np.arange(1, drafts + 1)))


def implied_alpha(stated: TauSpec) -> float:
    """The alpha whose geometric curve has the stated mean length (to 1e-12)."""
    if stated.tau >= stated.drafts + 1:
        return 1.0
    return float(brentq(lambda a: mean_length(a, stated.drafts) - stated.tau, 0.0, 1.0, xtol=1e-12))


def implied(stated: TauSpec) -> Acceptance:
    """The implied curve as one round's expected counts (per-position survivals alpha^k)."""
    survival = implied_alpha(stated) ** np.arange(1, stated.drafts + 1)
    k = stated.drafts
    return Acceptance(1.0, float(k), float(survival.sum()), survival)


def tau_domain(
    stated: TauSpec, spec: str, gamma: int, spread: float, spread_req: float
) -> DomainModel:
    """The parametric domain that serves the implied curve (its K positions; no more)."""
    if gamma > stated.drafts:
        raise InputError(
            None,
            None,
            f"acceptance {spec!r}: its tau is stated at {stated.drafts} drafts a round, so it "
            f"says nothing of more: use --gamma {stated.drafts} or less",
        )
    curve = tuple(implied(stated).conditional.tolist())
    latent = serving_latent(curve, spread, spread_req, f"acceptance {spec!r}")
    return DomainModel(f"tau:{stated.tau:g}@{stated.drafts}", latent)
