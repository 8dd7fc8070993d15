"""The parametric model's spreads, confidence slope and noise, measured on a recorded trace.

A trace with `tv_k` columns records, for every round and position, the exact probability that
the draft is accepted given its drafted prefix (1 - TV between the two distributions), so the
model's latent x = logit(p) is observed directly, not inferred from 0/1 outcomes:
- mu_k: the mean of x at position k;
- spread_req, spread: a one-way random-effects split of x - mu_k by request (method of moments:
  the between-request variance of request means, less the within-request variance over the
  request's cells); rho: the lag-1 autocorrelation over a request's rounds of what remains;
- overconf, noise: logit(conf_k) regressed on x with an intercept per position and one slope b;
  the model's c = sigmoid(overconf * (x + n)) has slope overconf and residual sd overconf * noise.
The live traces' figures and what they transfer: docs/presets.md, Spreads and confidence noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from dsim.acceptance.parametric import DomainModel, ParametricAcceptance
from dsim.acceptance.trace import conf_columns, trace_gamma, tv_columns
from dsim.errors import InputError

CLIP = 1e-3  # tv and conf reach 0 exactly; a logit past +-6.9 would be one cell's outlier


@dataclass(frozen=True)
class Spreads:
    """Variance between requests (raw: of request means; corrected: less the within-request
    noise those means carry), pooled variance within a request, lag-1 autocorrelation over
    rounds."""

    between_raw: float
    between: float
    within: float
    autocorr: float


@dataclass(frozen=True)
class ConfidenceFit:
    """A one-domain parametric model fitted to a trace."""

    q: tuple[float, ...]
    spread: float
    spread_req: float
    rho: float
    overconf: float
    noise: float

    def source(self) -> ParametricAcceptance:
        return ParametricAcceptance(
            len(self.q),
            [DomainModel("fit", self.q)],
            np.ones(1),
            spread=self.spread,
            spread_req=self.spread_req,
            overconf=self.overconf,
            rho=self.rho,
            noise=self.noise,
        )


def clipped_logit(a: np.ndarray) -> np.ndarray:
    return logit(np.clip(a, CLIP, 1.0 - CLIP))


def decompose(values: np.ndarray, seq: np.ndarray) -> Spreads:
    """Split (rows, positions) values, rows sorted by (seq, round), into request and round parts
    (each position centred on its own mean first)."""
    v = np.asarray(values, dtype=np.float64).reshape(len(seq), -1)
    resid = v - v.mean(axis=0)
    ids, inverse, rows = np.unique(seq, return_inverse=True, return_counts=True)
    cells = rows * v.shape[1]
    means = np.bincount(inverse, weights=resid.sum(axis=1), minlength=len(ids)) / cells
    within = resid - means[inverse, None]
    within_var = float((within**2).sum() / (cells.sum() - len(ids)))
    between_raw = float(np.var(means, ddof=1))
    same = seq[1:] == seq[:-1]
    lag = float((within[1:][same] * within[:-1][same]).sum() / (within**2).sum())
    between = max(between_raw - within_var * float(np.mean(1.0 / cells)), 0.0)
    return Spreads(between_raw, between, within_var, lag)


def fit_confidence(df: pd.DataFrame) -> ConfidenceFit:
    """Latent means, spreads, rho, overconf and noise of a validated trace with tv columns."""
    gamma = trace_gamma(df)
    if tv_columns(gamma)[0] not in df.columns:
        raise InputError(None, None, "fitting the confidence model needs a trace with tv_k columns")
    x = clipped_logit(df[tv_columns(gamma)].to_numpy())
    y = clipped_logit(df[conf_columns(gamma)].to_numpy())
    spreads = decompose(x, df["seq_id"].to_numpy())
    xd, yd = x - x.mean(axis=0), y - y.mean(axis=0)
    slope = float((xd * yd).sum() / (xd**2).sum())
    resid_sd = float(np.sqrt(((yd - slope * xd) ** 2).sum() / (xd.size - gamma - 1)))
    return ConfidenceFit(
        q=tuple(float(m) for m in expit(x.mean(axis=0))),
        spread=float(np.sqrt(spreads.within)),
        spread_req=float(np.sqrt(spreads.between)),
        rho=max(spreads.autocorr, 0.0),
        overconf=slope,
        noise=resid_sd / slope,
    )
