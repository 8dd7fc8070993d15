"""A finished sweep's table -> what the report and plots read: seed means, frontiers, gains
at matched throughput and maxima at the SLA anchors, per layout, over the points that count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dsim.pareto.config import SweepConfig
from dsim.pareto.exclusion import exclusions, sla_met
from dsim.pareto.frontier import (
    matched_gains,
    pareto_front,
    seed_fronts,
    seed_means,
    sla_throughputs,
)


@dataclass(frozen=True)
class Analysis:
    """Each table has a `layout` column ("" without a [layout] table)."""

    means: pd.DataFrame  # one row per policy, layout and load (means over seeds)
    front: pd.DataFrame  # the frontiers of the means, over the points that count
    gains: pd.DataFrame  # speed gain over the baseline at matched throughputs
    sla: pd.DataFrame  # maximum throughput (and per GPU) at each anchor


def _gpus(means: pd.DataFrame) -> float:
    """The layout's GPU count when every point has the same known one (else NaN: a replicas
    load axis changes it along the frontier, a measured profile does not say)."""
    gpus = means["gpus_total"].dropna().unique() if "gpus_total" in means else []
    return float(gpus[0]) if len(gpus) == 1 and means["gpus_total"].notna().all() else np.nan


def _layout(cfg: SweepConfig, points: pd.DataFrame) -> tuple[pd.DataFrame, ...]:
    policies, members = list(cfg.policies), cfg.baseline_members
    counts = points[points["excluded"] == ""]
    means, fronts = seed_means(points), seed_fronts(counts)
    front = pareto_front(means[means["excluded"] == ""])
    gains = matched_gains(front, policies, cfg.baseline, fronts=fronts, members=members)
    anchors = list(cfg.sla_anchors)
    sla = sla_throughputs(front, policies, cfg.baseline, anchors, fronts=fronts, members=members)
    sla["gpus"] = _gpus(means)
    sla["max_throughput_per_gpu"] = sla["max_throughput_tok_s"] / sla["gpus"]
    return means, front, gains, sla


def analyse(cfg: SweepConfig, points: pd.DataFrame) -> Analysis:
    """Mark the points that do not count (`excluded`, in place) and whether their seeds met
    the tail SLA (`sla_met`), then read each layout."""
    points["excluded"] = exclusions(points, cfg.sla)
    if cfg.sla.bounds:
        points["sla_met"] = sla_met(points, cfg.sla)
    parts = []
    for layout, part in points.groupby("layout", sort=False):
        tables = _layout(cfg, part.drop(columns="layout"))
        for table in tables:
            table.insert(0, "layout", layout)
        parts.append(tables)
    return Analysis(*(pd.concat(t, ignore_index=True) for t in zip(*parts, strict=True)))
