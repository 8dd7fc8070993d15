"""Pareto frontiers of (median per-user speed, throughput) and the figures read off them.

Each sweep point is (x = median per-user tok/s, y = output tok/s). A policy's frontier is its
non-dominated points joined by straight lines: along it, y rises while x falls. Everything
read off a frontier interpolates linearly between its points and never extrapolates past its
ends, so "cannot meet" and "out of range" mean exactly that the sweep did not reach there.

With several seeds, the frontier drawn and stored is that of the per-load means over seeds, and
every figure read off it is computed on each seed's own frontier, then reported as the mean over
seeds with its min and max.

A baseline is the best of its members at each throughput: one policy, or for `best-fixed`
every `fixed:K` of the sweep, whose upper envelope is the speed of the best fixed length at
that throughput (and its maximum throughput at an SLA is the best member's).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

X, Y = "tps_p50", "throughput_tok_s"
FRONTIER_COLUMNS = ["policy", "load", "point", X, Y]
SPREAD_COLUMNS = [f"{X}_min", f"{X}_max", f"{Y}_min", f"{Y}_max", "seeds"]


def seed_means(points: pd.DataFrame) -> pd.DataFrame:
    """One row per policy and load: every numeric figure averaged over seeds, the min and max of
    x and y over seeds, the number of seeds, and the point keys joined by commas."""
    group = points.groupby(["policy", "load"], sort=False)
    numeric = [c for c in points.select_dtypes("number").columns if c not in ("load", "seed")]
    spread = group[[X, Y]].agg(["min", "max"])
    spread.columns = [f"{c}_{stat}" for c, stat in spread.columns]
    out = group[numeric].mean().join(spread)
    out["seeds"] = group.size()
    out["point"] = group["point"].agg(",".join)
    if "excluded" in points:  # the same in every seed (dsim.pareto.exclusion)
        out["excluded"] = group["excluded"].first()
    return out.reset_index()


def seed_fronts(points: pd.DataFrame) -> list[pd.DataFrame]:
    """Each seed's own frontier (one frontier when the table has no seed column)."""
    if "seed" not in points or points.empty:
        return [pareto_front(points)]
    return [pareto_front(p) for _, p in points.groupby("seed", sort=True)]


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
    return front.reindex(columns=FRONTIER_COLUMNS + [c for c in SPREAD_COLUMNS if c in points])


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


def _best(values: list[float]) -> float:
    """The largest of the values that are not NaN; NaN when none is."""
    finite = [v for v in values if not np.isnan(v)]
    return max(finite) if finite else float("nan")


def baseline_speed(front: pd.DataFrame, members: tuple[str, ...], throughput: float) -> float:
    """The baseline's speed at this throughput: the best of its members' (NaN if none reaches)."""
    return _best([speed_at_throughput(front, m, throughput) for m in members])


def baseline_sla(front: pd.DataFrame, members: tuple[str, ...], sla_tps: float) -> float:
    """The baseline's maximum throughput at an anchor: the best of its members'."""
    return _best([throughput_at_sla(front, m, sla_tps) for m in members])


def _range(front: pd.DataFrame, members: tuple[str, ...]) -> tuple[float, float] | None:
    """The throughputs any of `members`' frontiers covers (their union), or None."""
    ys = [y for y in (_curve(front, m)[1] for m in members) if len(y)]
    return (min(y[0] for y in ys), max(y[-1] for y in ys)) if ys else None


def matched_gains(
    front: pd.DataFrame,
    policies: list[str],
    baseline: str,
    levels: int = 6,
    fronts: list[pd.DataFrame] | None = None,
    members: tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """Per-user speed gain over the baseline at `levels` throughputs every frontier covers.

    Speeds and gains are read off each of `fronts` (the per-seed frontiers; default `front`
    alone) and given as the mean over them, with the gain's min and max. The levels are evenly
    spaced over the throughput range all those frontiers of all the policies and of the
    baseline's members share, so each level compares every policy at the same throughput in
    every seed, with every member. Where the ranges share nothing, the union of the members'
    ranges on `front` is used and a frontier that does not reach a level gives NaN there. The
    baseline's members are not compared with it.
    """
    fronts = [front] if fronts is None else fronts
    members = members or (baseline,)
    compared = [p for p in policies if p != baseline and p not in members]
    ranges = [_range(f, (p,)) for f in fronts for p in (*compared, *members)]
    ranges = [r for r in ranges if r is not None]
    columns = ["policy", "throughput_tok_s", "tps_p50", "baseline_tps_p50", "gain"]
    columns += ["gain_min", "gain_max"]
    base_range = _range(front, members)
    if not ranges or base_range is None:
        return pd.DataFrame([], columns=columns)
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    if lo > hi:
        lo, hi = base_range
    rows = []
    for level in np.linspace(lo, hi, levels) if hi > lo else [lo]:
        base = np.array([baseline_speed(f, members, level) for f in fronts])
        for policy in compared:
            speed = np.array([speed_at_throughput(f, policy, level) for f in fronts])
            gain = speed / base - 1.0
            rows.append(
                {
                    "policy": policy,
                    "throughput_tok_s": float(level),
                    "tps_p50": float(np.mean(speed)),
                    "baseline_tps_p50": float(np.mean(base)),
                    "gain": float(np.mean(gain)),
                    "gain_min": float(np.min(gain)),
                    "gain_max": float(np.max(gain)),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def sla_throughputs(
    front: pd.DataFrame,
    policies: list[str],
    baseline: str,
    anchors: list[float],
    fronts: list[pd.DataFrame] | None = None,
    members: tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """Max throughput of each policy (and of a baseline that is not one) at each anchor, and
    its ratio to the baseline's.

    The ratio is inf where only the baseline cannot meet the anchor, NaN where the policy can't.
    Read off each of `fronts` (per-seed frontiers; default `front`): the mean over seeds, with
    the ratio's min and max (NaN as soon as one seed cannot meet the anchor).
    """
    fronts = [front] if fronts is None else fronts
    members = members or (baseline,)
    rows = []
    for anchor in anchors:
        base = np.array([baseline_sla(f, members, anchor) for f in fronts])
        for policy in [*policies, *([] if baseline in policies else [baseline])]:
            if policy == baseline:
                best = base
            else:
                best = np.array([throughput_at_sla(f, policy, anchor) for f in fronts])
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(base > 0, best / base, np.where(best > 0, np.inf, np.nan))
            rows.append(
                {
                    "sla_tps": anchor,
                    "policy": policy,
                    "max_throughput_tok_s": float(np.mean(best)),
                    "ratio": float(np.mean(ratio)),
                    "ratio_min": float(np.min(ratio)),
                    "ratio_max": float(np.max(ratio)),
                }
            )
    columns = ["sla_tps", "policy", "max_throughput_tok_s", "ratio", "ratio_min", "ratio_max"]
    return pd.DataFrame(rows, columns=columns)
