"""Sequential Temperature Scaling of conditional confidences, and its metrics; `fit_platt`
adds an offset per position (an experiment's alternative, not used by the CLI).

Method: docs/design.md, Sequential Temperature Scaling (STS).

The scheduler multiplies conditional confidences into prefix survivals a_k, so calibration is
judged on a_k against "the first k drafts were all accepted", position by position: T_k is
fitted with T_1..T_{k-1} already fixed, because a_k inherits their errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import rankdata

from dsim.errors import InputError
from dsim.inputs import read_json_object

CLIP = 1e-6
N_BINS = 20
COARSE_GRID = np.geomspace(0.05, 20.0, 71)  # ~9% apart
FINE_POINTS = 41  # between the coarse neighbours of the best point: ~0.4% apart
_CHUNK = 1 << 20  # grid points x rows evaluated at once (bounds memory, keeps numpy busy)


def logit(conf: np.ndarray) -> np.ndarray:
    c = np.clip(conf, CLIP, 1.0 - CLIP)
    return np.log(c) - np.log1p(-c)


def apply_temperatures(
    conf: np.ndarray, temperatures: np.ndarray, offsets: np.ndarray | float = 0.0
) -> np.ndarray:
    """c' = sigmoid(logit(c) / T_k + b_k), column k by T_k and b_k (STS: b = 0); c is clipped
    to [1e-6, 1 - 1e-6] first."""
    t = np.asarray(temperatures, dtype=np.float64)
    return expit(logit(conf) / t + np.asarray(offsets, dtype=np.float64))


def prefix_labels(accepted: np.ndarray, gamma: int) -> np.ndarray:
    """(N, gamma) 0/1: column k-1 says the first k drafts were all accepted."""
    return (np.asarray(accepted)[:, None] >= np.arange(1, gamma + 1)).astype(np.float64)


def ece(pred: np.ndarray, label: np.ndarray, bins: int = N_BINS) -> np.ndarray | float:
    """Expected calibration error with equal-width bins: sum_b (n_b/N) |mean pred - mean label|.

    `pred` may be (G, N) to score G candidate predictions against one label vector at once.
    """
    p = np.atleast_2d(pred)
    g, n = p.shape
    b = np.minimum((p * bins).astype(np.int64), bins - 1) + bins * np.arange(g)[:, None]
    gap = np.bincount(b.ravel(), weights=(p - label).ravel(), minlength=g * bins)
    out = np.abs(gap.reshape(g, bins)).sum(axis=1) / n
    return out if np.ndim(pred) == 2 else float(out[0])


def ece_noise(
    pred: np.ndarray, bins: int = N_BINS, draws: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """The ECE a perfectly calibrated predictor with these very predictions shows at this
    sample size (labels drawn as Bernoulli(pred)): (mean, 95th percentile) over draws. On a few
    hundred rounds sampling alone gives several percent; a measured ECE below the 95th
    percentile is consistent with perfect calibration."""
    p = np.asarray(pred, dtype=np.float64)
    labels = np.random.default_rng(seed).random((draws, len(p))) < p  # (draws, N)
    b = np.minimum((p * bins).astype(np.int64), bins - 1) + bins * np.arange(draws)[:, None]
    gap = np.bincount(b.ravel(), weights=(p - labels).ravel(), minlength=draws * bins)
    e = np.abs(gap.reshape(draws, bins)).sum(axis=1) / len(p)  # (draws,)
    return float(e.mean()), float(np.percentile(e, 95))


def reliability_bins(
    pred: np.ndarray, label: np.ndarray, bins: int = N_BINS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per equal-width bin: mean prediction, observed frequency (NaN when empty), count."""
    b = np.minimum((pred * bins).astype(np.int64), bins - 1)
    count = np.bincount(b, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_pred = np.bincount(b, weights=pred, minlength=bins) / count
        observed = np.bincount(b, weights=label, minlength=bins) / count
    return mean_pred, observed, count


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """Area under the ROC curve by the Mann-Whitney rank sum (ties count half); NaN if one class."""
    pos = np.asarray(label) > 0.5
    n1 = int(pos.sum())
    n0 = pos.size - n1
    if n1 == 0 or n0 == 0:
        return float("nan")
    ranks = rankdata(score)
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def brier(pred: np.ndarray, label: np.ndarray) -> float:
    return float(np.mean((pred - label) ** 2))


def fit_sts(conf: np.ndarray, accepted: np.ndarray) -> np.ndarray:
    """Temperatures T_1..T_gamma minimising the ECE of each prefix survival, in order."""
    z = logit(conf)
    labels = prefix_labels(accepted, conf.shape[1])
    survival = np.ones(len(conf))
    temps = np.empty(conf.shape[1])
    for k in range(conf.shape[1]):
        best = _grid_argmin(COARSE_GRID, survival, z[:, k], labels[:, k])
        i = int(np.searchsorted(COARSE_GRID, best))
        lo, hi = COARSE_GRID[max(i - 1, 0)], COARSE_GRID[min(i + 1, len(COARSE_GRID) - 1)]
        temps[k] = _grid_argmin(np.geomspace(lo, hi, FINE_POINTS), survival, z[:, k], labels[:, k])
        survival = survival * expit(z[:, k] / temps[k])
    return temps


def _grid_argmin(grid: np.ndarray, survival: np.ndarray, zk: np.ndarray, yk: np.ndarray) -> float:
    """The grid temperature whose survival * sigmoid(zk / T) has the smallest ECE against yk."""
    step = max(1, _CHUNK // max(len(zk), 1))
    scores = np.concatenate(
        [
            ece(survival * expit(zk / grid[s : s + step, None]), yk)
            for s in range(0, len(grid), step)
        ]
    )
    return float(grid[int(np.argmin(scores))])


def fit_platt(conf: np.ndarray, accepted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Temperatures T_k and offsets b_k, in order, each pair minimising the log-loss of the
    prefix survival a_k = a_{k-1} sigmoid(z_k / T_k + b_k) against its label.

    The offset removes what a temperature cannot: a head whose confidence is too high on
    average (a temperature only pulls logits toward 0, i.e. toward 0.5). Log-loss, not ECE, is
    the criterion: with an offset a constant prediction at the base rate has an ECE of 0 and
    ranks nothing, while log-loss is a proper score. T_k stays in the STS grid's range.
    """
    z = logit(conf)
    labels = prefix_labels(accepted, conf.shape[1])
    survival = np.ones(len(conf))
    temps, offsets = np.empty(conf.shape[1]), np.empty(conf.shape[1])
    bounds = [(1.0 / COARSE_GRID[-1], 1.0 / COARSE_GRID[0]), (-20.0, 20.0)]  # (1/T, b)
    for k in range(conf.shape[1]):
        args = (survival, z[:, k], labels[:, k])
        res = minimize(_survival_log_loss, [1.0, 0.0], args, "L-BFGS-B", True, bounds=bounds)
        temps[k], offsets[k] = 1.0 / res.x[0], res.x[1]
        survival = survival * expit(z[:, k] * res.x[0] + res.x[1])
    return temps, offsets


def _survival_log_loss(
    params: np.ndarray, survival: np.ndarray, zk: np.ndarray, yk: np.ndarray
) -> tuple[float, np.ndarray]:
    """Mean log-loss of survival * sigmoid(a zk + b) against yk, and its gradient in (a, b)."""
    a, b = params
    sig = expit(a * zk + b)
    q = np.clip(survival * sig, 1e-12, 1.0 - 1e-12)
    loss = -np.mean(yk * np.log(q) + (1.0 - yk) * np.log1p(-q))
    dloss_du = (1.0 - sig) * ((1.0 - yk) * q / (1.0 - q) - yk)  # u = a zk + b
    return float(loss), np.array([np.mean(dloss_du * zk), np.mean(dloss_du)])


def position_metrics(
    conf: np.ndarray, accepted: np.ndarray, temperatures: np.ndarray
) -> list[dict[str, Any]]:
    """ECE, AUC and Brier of the prefix survival per position, raw and after STS, and the
    ECE sampling alone would give the calibrated predictions (`ece_noise`).

    AUC at position 1 cannot move (one monotone map); from position 2 on the survival is a
    product of factors scaled by different T_i, so its ranking, and its AUC, may move slightly.
    """
    labels = prefix_labels(accepted, conf.shape[1])
    before = np.cumprod(conf, axis=1)
    after = np.cumprod(apply_temperatures(conf, temperatures), axis=1)
    rows = []
    for k in range(conf.shape[1]):
        y = labels[:, k]
        row: dict[str, Any] = {
            "position": k + 1,
            "temperature": float(temperatures[k]),
            "rounds": len(y),
            "survival_rate": float(y.mean()),
        }
        for tag, pred in (("before", before[:, k]), ("after", after[:, k])):
            row[f"ece_{tag}"] = ece(pred, y)
            row[f"auc_{tag}"] = _finite_or_none(auc(pred, y))
            row[f"brier_{tag}"] = brier(pred, y)
        row["ece_after_noise_mean"], row["ece_after_noise_p95"] = ece_noise(after[:, k])
        rows.append(row)
    return rows


def _finite_or_none(x: float) -> float | None:
    """JSON has no NaN: an undefined metric is written as null."""
    return x if np.isfinite(x) else None


def split_by_sequence(
    seq_id: np.ndarray, holdout: float, seed: int, path: str | Path | None = None
) -> np.ndarray:
    """Held-out mask over rows, whole sequences at a time (rounds of a sequence are correlated).

    holdout = 0 holds nothing out (metrics are then in-sample).
    """
    if not 0.0 <= holdout < 1.0:
        raise InputError(None, None, f"--holdout must be in [0, 1), got {holdout}")
    if holdout == 0.0:
        return np.zeros(len(seq_id), dtype=bool)
    ids = np.unique(seq_id)
    n_held = round(holdout * len(ids))
    if not 1 <= n_held < len(ids):
        raise InputError(
            path, None, f"{len(ids)} sequence(s) cannot be split with holdout {holdout}"
        )
    held = np.random.default_rng(seed).permutation(ids)[:n_held]
    return np.isin(seq_id, held)


def read_calibration(path: str | Path) -> dict[str, Any]:
    return read_json_object(path, "calibration file")


def parse_temperatures(obj: Any, where: str | Path | None, gamma: int) -> np.ndarray:
    """The first gamma temperatures of a calibration object ({"temperatures": [...], ...})."""
    temps = obj.get("temperatures") if isinstance(obj, dict) else None
    if not isinstance(temps, list) or not temps:
        raise InputError(where, None, "calibration needs a non-empty list 'temperatures'")
    try:
        arr = np.asarray(temps, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(where, None, "calibration 'temperatures' must be numbers") from None
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        k = int(np.argmax(bad)) + 1
        raise InputError(where, None, f"temperature {k} must be positive, got {temps[k - 1]!r}")
    if len(arr) < gamma:
        raise InputError(where, None, f"calibration has {len(arr)} temperatures, gamma is {gamma}")
    return arr[:gamma]
