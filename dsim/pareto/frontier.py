"""Pareto frontiers of (median per-user speed, throughput) and the figures read off them.

Each sweep point is (x = median per-user tok/s, y = output tok/s). A policy's frontier is its
non-dominated points joined by straight lines: along it, y rises while x falls. Everything
read off a frontier interpolates linearly between its points and never extrapolates past its
ends, so "cannot meet" and "out of range" mean exactly that the sweep did not reach there.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

X, Y = "tps_p50", "throughput_tok_s"
FRONTIER_COLUMNS = ["policy", "load", "point", X, Y]


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """Per policy, the points no other point of that policy beats on both x and y.

    Rows come out per policy (in first-appearance order) by ascending throughput.
    """
    parts = []
    for policy in points["policy"].unique():
        p = points[(points["policy"] == policy) & points[X].notna()]
        p = p.sort_values([X, Y], ascending=False, kind="stable")
        y = p[Y].to_numpy()
        keep = np.concatenate([[True], y[1:] > np.maximum.accumulate(y)[:-1]])[: len(y)]
        parts.append(p[keep])
    front = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return front.reindex(columns=FRONTIER_COLUMNS)


def _curve(front: pd.DataFrame, policy: str) -> tuple[np.ndarray, np.ndarray]:
    f = front[front["policy"] == policy]
    return f[X].to_numpy(np.float64), f[Y].to_numpy(np.float64)


def speed_at_throughput(front: pd.DataFrame, policy: str, throughput: float) -> float:
    """Median per-user speed on the policy's frontier at this throughput; NaN outside its range."""
    x, y = _curve(front, policy)
    if not len(y) or not y[0] <= throughput <= y[-1]:
        return float("nan")
    return float(np.interp(throughput, y, x))


def throughput_at_sla(front: pd.DataFrame, policy: str, sla_tps: float) -> float:
    """Highest throughput on the frontier whose median per-user speed is >= sla_tps.

    NaN means the policy cannot meet the anchor even at the lightest load swept.
    """
    x, y = _curve(front, policy)
    if not len(x) or sla_tps > x[0]:
        return float("nan")
    if sla_tps <= x[-1]:
        return float(y[-1])
    return float(np.interp(sla_tps, x[::-1], y[::-1]))


def matched_gains(
    front: pd.DataFrame, policies: list[str], baseline: str, levels: int = 6
) -> pd.DataFrame:
    """Per-user speed gain over the baseline at `levels` throughputs every frontier covers.

    The levels are evenly spaced over the throughput range all the policies' frontiers share,
    so each level compares every policy at the same throughput. Where the ranges share nothing,
    the baseline's range is used and a policy that does not reach a level gets NaN there.
    """
    ranges = [_curve(front, p)[1] for p in policies]
    ranges = [(y[0], y[-1]) for y in ranges if len(y)]
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    if lo > hi:
        _, base_y = _curve(front, baseline)
        lo, hi = base_y[0], base_y[-1]
    rows = []
    for level in np.linspace(lo, hi, levels) if hi > lo else [lo]:
        base = speed_at_throughput(front, baseline, level)
        for policy in policies:
            if policy == baseline:
                continue
            speed = speed_at_throughput(front, policy, level)
            rows.append(
                {
                    "policy": policy,
                    "throughput_tok_s": float(level),
                    "tps_p50": speed,
                    "baseline_tps_p50": base,
                    "gain": speed / base - 1.0,
                }
            )
    columns = ["policy", "throughput_tok_s", "tps_p50", "baseline_tps_p50", "gain"]
    return pd.DataFrame(rows, columns=columns)


def sla_throughputs(
    front: pd.DataFrame, policies: list[str], baseline: str, anchors: list[float]
) -> pd.DataFrame:
    """Max throughput of each policy at each anchor, and its ratio to the baseline's.

    The ratio is inf where only the baseline cannot meet the anchor, NaN where the policy can't.
    """
    rows = []
    for anchor in anchors:
        base = throughput_at_sla(front, baseline, anchor)
        for policy in policies:
            best = throughput_at_sla(front, policy, anchor)
            ratio = best / base if base > 0 else (np.inf if best > 0 else np.nan)
            rows.append(
                {"sla_tps": anchor, "policy": policy, "max_throughput_tok_s": best, "ratio": ratio}
            )
    return pd.DataFrame(rows, columns=["sla_tps", "policy", "max_throughput_tok_s", "ratio"])
