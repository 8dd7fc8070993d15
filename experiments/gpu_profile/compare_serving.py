"""Compare a serving-grade GPU profile with the `gpu-only` estimate, point by point (rules:
README.md, Serving-grade profile). Runs on the CPU once the profile has come back:

    python experiments/gpu_profile/compare_serving.py [--profile profiles/h200-qwen3-8b-serving.csv]

Writes serving_comparison.{csv,json,md} into experiments/gpu_profile/serving/ (or --out-dir).
The estimate is evaluated at the measured points themselves (`gpu_model.step_time` under the
`gpu-only` preset: GPU work, no engine terms), Qwen3-8B bf16 on one H200.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from dsim.fileio import write_json, write_with  # noqa: E402
from dsim.hardware import gpu_fit, zoo  # noqa: E402
from dsim.hardware.arch import Parallel  # noqa: E402
from dsim.hardware.engines import get_engine  # noqa: E402
from dsim.hardware.gpu_model import get_gpu, step_time  # noqa: E402
from dsim.hardware.latency import read_profile  # noqa: E402

LEVEL_TARGET = 0.20  # median |error| of the gpu-only estimate (README's rule)
SHAPE_TOL = 0.10  # T(R, q) / T(R, 1) within 10% of the measured ratio (README's rule)


def gpu_only_ms(points: pd.DataFrame, model: str = "qwen3-8b", gpu: str = "h200") -> np.ndarray:
    """The gpu-only estimate (ms) at each verify point (batch_tokens, num_seqs, context_len)."""
    spec, arch = get_gpu(gpu), zoo.load_arch(model)
    cal = gpu_fit.calibration(spec)
    b, r, c = (points[k].to_numpy(np.float64) for k in ("batch_tokens", "num_seqs", "context_len"))
    terms = get_engine("gpu-only").terms
    seconds = step_time(
        arch, Parallel(), spec, cal.kernels, cal.allreduce, terms, b, r, c, np.zeros(len(b), bool)
    )
    return seconds * 1e3


def compare(measured: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Per point: measured and estimated ms, level error (estimate - measured) / measured,
    and for q > 1 the shape T(R, q) / T(R, 1) of both and its error (estimated / measured - 1)."""
    t = measured[measured["phase"] == "verify"].copy()
    t["q"] = t["batch_tokens"] // t["num_seqs"]
    t["estimate_ms"] = gpu_only_ms(t)
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


def markdown(table: pd.DataFrame, summary: dict, profile: str) -> str:
    lv, sh = summary["level"], summary["shape"]
    lines = [
        f"# Serving-grade profile vs the gpu-only estimate (`{profile}`)",
        "",
        f"- Level: median |error| {lv['median_abs']:.1%} (target < {LEVEL_TARGET:.0%}: "
        f"{'met' if lv['met'] else 'missed'}), worst {lv['worst_abs']:.1%}, median signed "
        f"{lv['median_signed']:+.1%}; estimate below measured at {lv['estimate_below_measured']}"
        f" of {lv['points']} points.",
        f"- Shape T(R, q) / T(R, 1): {sh['cells_within_tolerance']} of {sh['cells']} cells "
        f"within {SHAPE_TOL:.0%}"
        + (f", median |error| {sh['median_abs_error']:.1%}" if sh["cells"] else ""),
        "",
        "| R | q | C | measured ms | estimate ms | level error | measured shape | "
        "estimated shape | shape error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in table.itertuples():
        shape = "" if np.isnan(row.shape_error) else f"{row.shape_error:+.1%}"
        lines.append(
            f"| {row.num_seqs} | {row.q} | {row.context_len} | {row.latency_ms:.3f} | "
            f"{row.estimate_ms:.3f} | {row.level_error:+.1%} | {row.measured_shape:.3f} | "
            f"{row.estimated_shape:.3f} | {shape} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(ROOT / "profiles/h200-qwen3-8b-serving.csv"))
    parser.add_argument("--out-dir", default=str(HERE / "serving"))
    args = parser.parse_args(argv)
    table, summary = compare(read_profile(args.profile))
    out = Path(args.out_dir)
    name = Path(args.profile).name
    write_with(out / "serving_comparison.csv", lambda tmp: table.to_csv(tmp, index=False))
    write_json(out / "serving_comparison.json", {"profile": name, **summary})
    md = markdown(table, summary, name)
    write_with(out / "serving_comparison.md", lambda tmp: tmp.write_text(md))
    print(md.split("\n\n| R")[0])


if __name__ == "__main__":
    main()
