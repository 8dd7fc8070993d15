"""A sweep's size for the size gate (dsim/size_gate.py), counted from its config alone."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from dsim import spec_grammar
from dsim.pareto.config import SweepConfig
from dsim.run_inputs import load_spec_workload
from dsim.size_gate import WorkSize
from dsim.workload import load_workload

SAMPLE = 64  # sweeps with more distinct workloads count this many, evenly spaced, and scale


def sweep_size(cfg: SweepConfig, workers: int) -> WorkSize:
    """A sweep's points and requests, from its config alone (before a spec is built per point).

    Its policies and layouts share each (load, seed)'s workload; each distinct workload is
    counted (each trace read once) or, past SAMPLE of them, an even sample scaled to all."""
    axis_rate = cfg.load_axis == "rate_scale"
    synthetic = spec_grammar.is_synthetic(cfg.base.trace)
    keys = [
        (load if axis_rate else cfg.base.rate_scale, seed if synthetic else 0)
        for load in cfg.loads
        for seed in cfg.seeds
    ]  # (rate scale, seed): all a point's workload depends on beyond the base spec
    counts: dict[tuple[float, int], int] = dict.fromkeys(keys, 0)
    chosen = list(counts)
    if len(chosen) > SAMPLE:
        chosen = [chosen[i * len(chosen) // SAMPLE] for i in range(SAMPLE)]
    trace = cache(lambda seed: load_workload(cfg.base.trace, seed))
    for rate, seed in chosen:
        spec = replace(cfg.base, rate_scale=rate, seed=seed)
        counts[rate, seed] = len(load_spec_workload(spec, trace(seed)))
    sampled = len(chosen) < len(counts)
    per_key = sum(counts[k] for k in chosen) / len(chosen) if sampled else None
    requests = sum(counts[k] if per_key is None else per_key for k in keys)
    repeats = len(cfg.policies) * max(1, len(cfg.layouts))
    return WorkSize("this sweep", len(keys) * repeats, round(requests * repeats), workers, sampled)
