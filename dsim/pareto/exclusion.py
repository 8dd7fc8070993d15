"""Which sweep points count (docs/pareto.md): an unstable point, or one that misses an `[sla]`
tail bound, is excluded from the frontiers, so never chosen for an SLA anchor or a gain; and
whether each point met the tail SLA in all its seeds, some or none."""

from __future__ import annotations

import pandas as pd

from dsim.sla import Sla

# The columns that identify one point of the sweep apart from its seed.
POINT_KEYS = ("policy", "layout", "load")


def _reasons(row: pd.Series, sla: Sla) -> list[str]:
    why = ["unstable"] if bool(row.get("unstable", False)) else []
    return why + sla.missed(row)


def sla_met(points: pd.DataFrame, sla: Sla) -> pd.Series:
    """Per point, whether its seeds met every tail bound: "all", "some" or "none"."""
    met = pd.Series([not sla.missed(row) for _, row in points.iterrows()], index=points.index)
    keys = [points[k] for k in POINT_KEYS if k in points]
    return met.groupby(keys, sort=False).transform(
        lambda m: "all" if m.all() else "some" if m.any() else "none"
    )


def exclusions(points: pd.DataFrame, sla: Sla) -> pd.Series:
    """Per point, "" when it counts, else why not ("unstable", "ttft_p99_s > 10"); a point
    excluded in one seed is excluded in every seed, so each seed's frontier and the frontier of
    the means are drawn over the same loads."""
    own = pd.Series(
        ["; ".join(_reasons(row, sla)) for _, row in points.iterrows()],
        index=points.index,
        dtype=object,
    )
    keys = [points[k] for k in POINT_KEYS if k in points]
    return own.groupby(keys, sort=False).transform(
        lambda r: "; ".join(dict.fromkeys(w for x in r for w in x.split("; ") if w))
    )
