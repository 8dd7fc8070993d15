"""A measured verify-step profile against the `gpu-only` estimate, point by point: the level
(estimate / measured - 1) and the shape T(R, q) / T(R, 1) per cell. The rule and its targets
are the serving-grade profile study's (the GPU profile study); the estimate is
the step model under the `gpu-only` preset (GPU work, no engine terms)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dsim.hardware.arch import Parallel
from dsim.hardware.engines import get_engine
from dsim.hardware.pricing import pricing

LEVEL_TARGET = 0.20  # median |error| of the gpu-only estimate (README's rule)
SHAPE_TOL = 0.10  # T(R, q) / T(R, 1) within 10% of the measured ratio (README's rule)


def gpu_only_ms(points: pd.DataFrame, model: str = "qwen3-8b", gpu: str = "h200") -> np.ndarray:
    """The gpu-only estimate (ms) at each verify point (batch_tokens, num_seqs, context_len)."""
    b, r, c = (points[k].to_numpy(np.float64) for k in ("batch_tokens", "num_seqs", "context_len"))
    preset = get_engine("gpu-only")
    price = pricing(model, gpu, Parallel(), preset.custom_allreduce, preset.graphs, preset.name)
    return price.step(preset.terms, b, r, c, np.zeros(len(b), bool)) * 1e3


def compare(measured: pd.DataFrame, gpu: str = "h200") -> tuple[pd.DataFrame, dict]:
    """On `gpu`, per point: measured and estimated ms, level error (estimate - measured) / measured,
    and for q > 1 the shape T(R, q) / T(R, 1) of both and its error (estimated / measured - 1)."""
    t = measured[measured["phase"] == "verify"].copy()
    t["q"] = t["batch_tokens"] // t["num_seqs"]
    t["estimate_ms"] = gpu_only_ms(t, gpu=gpu)
    t["level_error"] = t["estimate_ms"] / t["latency_ms"] - 1
    base = t[t["q"] == 1].set_index(["num_seqs", "context_len"])
    key = pd.MultiIndex.from_frame(t[["num_seqs", "context_len"]])
    has_base = key.isin(base.index)
    ref_meas = base["latency_ms"].reindex(key).to_numpy()
    ref_est = base["estimate_ms"].reindex(key).to_numpy()
    t["measured_shape"] = t["latency_ms"].to_numpy() / ref_meas
    t["estimated_shape"] = t["estimate_ms"].to_numpy() / ref_est
    t["shape_error"] = np.where(
        (t["q"] > 1) & has_base, t["estimated_shape"] / t["measured_shape"] - 1, np.nan
    )
    cols = ["num_seqs", "q", "context_len", "batch_tokens", "latency_ms", "estimate_ms",
            "level_error", "measured_shape", "estimated_shape", "shape_error"]  # fmt: skip
    table = t[cols].sort_values(["context_len", "num_seqs", "q"]).reset_index(drop=True)
    level, shape = table["level_error"].abs(), table["shape_error"].dropna().abs()
    summary = {
        "level": {
            "points": int(len(table)),
            "median_abs": float(level.median()),
            "worst_abs": float(level.max()),
            "median_signed": float(table["level_error"].median()),
            "estimate_below_measured": int((table["level_error"] < 0).sum()),
            "target_median_abs": LEVEL_TARGET,
            "met": bool(level.median() < LEVEL_TARGET),
        },
        "shape": {
            "cells": int(len(shape)),
            "cells_within_tolerance": int((shape <= SHAPE_TOL).sum()),
            "median_abs_error": float(shape.median()) if len(shape) else None,
            "worst_abs_error": float(shape.max()) if len(shape) else None,
            "tolerance": SHAPE_TOL,
        },
    }
    return table, summary
