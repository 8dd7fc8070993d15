"""How well conditional confidences tell accepted drafts from rejected ones, position by position.

Position k is judged on the rounds that reached draft k (drafts 1..k-1 accepted), its
confidence conf_k against "draft k accepted": AUC (ranking only; 0.5 is a coin), and the
calibration summary a scheduler multiplying confidences needs, the bias (mean confidence minus
the accept rate) and the ECE. One owner for recorded traces and simulated rounds alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dsim.acceptance.calibration import auc, ece


def discrimination(conf: np.ndarray, accepted: np.ndarray) -> list[dict[str, Any]]:
    """Per position: rounds reaching it, AUC (None with one outcome), mean confidence, accept
    rate, bias and ECE (None where no round reached it)."""
    rows = []
    for k in range(conf.shape[1]):
        reach = accepted >= k
        c, y = conf[reach, k], (accepted[reach] > k).astype(np.float64)
        row: dict[str, Any] = {"position": k + 1, "reached": int(reach.sum())}
        if not len(y):
            rows.append({**row, "auc": None, "conf": None, "rate": None, "bias": None, "ece": None})
            continue
        a = auc(c, y)
        rate, mean_conf = float(y.mean()), float(c.mean())
        rows.append(
            {
                **row,
                "auc": a if np.isfinite(a) else None,
                "conf": mean_conf,
                "rate": rate,
                "bias": mean_conf - rate,
                "ece": ece(c, y),
            }
        )
    return rows
