"""Which sweep points count (docs/pareto.md): an unstable point, or one past an `[sla]` TTFT
bound, is excluded from the frontiers, so never chosen for an SLA anchor or a gain."""

from __future__ import annotations

import pandas as pd

# The columns that identify one point of the sweep apart from its seed.
POINT_KEYS = ("policy", "layout", "load")


def _reasons(row: pd.Series, bounds: tuple[tuple[str, float], ...]) -> list[str]:
    why = ["unstable"] if bool(row.get("unstable", False)) else []
    return why + [f"{key} > {bound:g}" for key, bound in bounds if row[key] > bound]


def exclusions(points: pd.DataFrame, bounds: tuple[tuple[str, float], ...]) -> pd.Series:
    """Per point, "" when it counts, else why not ("unstable", "ttft_p99_s > 10"); a point
    excluded in one seed is excluded in every seed, so each seed's frontier and the frontier of
    the means are drawn over the same loads."""
    own = pd.Series(
        ["; ".join(_reasons(row, bounds)) for _, row in points.iterrows()],
        index=points.index,
        dtype=object,
    )
    keys = [points[k] for k in POINT_KEYS if k in points]
    return own.groupby(keys, sort=False).transform(
        lambda r: "; ".join(dict.fromkeys(w for x in r for w in x.split("; ") if w))
    )
