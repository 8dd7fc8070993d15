"""Compare the calibrated H200 estimate with the profiles measured on an H200 (rules: README.md).

Run from the repo root: `python experiments/gpu_profile/compare.py`. Reads
profiles/h200-qwen3-8b{,-kernels}{,-drafter}.csv and run2's repeat; writes comparison.md and
comparison.json beside this file. The estimate is evaluated at the measured points themselves
(dsim.hardware.gpu_model.step_costs), not read off the shipped estimate's interpolated CSV.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from dsim.hardware import gpu_fit, zoo  # noqa: E402
from dsim.hardware.gpu_model import (  # noqa: E402
    Parallel,
    StepOverhead,
    get_gpu,
    step_costs,
    step_parts,
    step_seconds,
)
from dsim.hardware.latency import read_profile  # noqa: E402

KEY = ["phase", "batch_tokens", "num_seqs", "context_len"]
SHAPE_TOL = 0.10  # the README's shape rule
LEVEL_TARGET = 0.20  # the README's GPU-work target (median |error|)
DEFAULT_DRAFT_RATIO = 0.1  # dsim run's --draft-cost default


def _model(points: pd.DataFrame) -> tuple:
    """The estimate's inputs for Qwen3-8B bf16 on one H200 at each row of `points`."""
    spec, arch = get_gpu("h200"), zoo.load_arch("qwen3-8b")
    cal = gpu_fit.calibration(spec)
    args = [points[c].to_numpy(np.float64) for c in ("batch_tokens", "num_seqs", "context_len")]
    pre = (points["phase"] == "prefill").to_numpy()
    common = (arch, Parallel(tp=1, ep=1, dtype="bf16"), spec, cal.kernels, cal.allreduce)
    return cal, common, (*args, pre)


def estimate(points: pd.DataFrame, overhead_scale: float) -> np.ndarray:
    """Estimated step latency (ms) at each measured point, overhead scaled as --overhead-scale."""
    cal, common, args = _model(points)
    scale = overhead_scale
    overhead = StepOverhead(cal.overhead.per_layer_s * scale, cal.overhead.per_seq_s * scale)
    return step_seconds(step_costs(*common, overhead, *args)) * 1e3


def parts_ms(points: pd.DataFrame) -> dict[str, np.ndarray]:
    """The estimate's GPU work by component (ms) at each point (for attribution)."""
    _, common, args = _model(points)
    return {k: v * 1e3 for k, v in step_parts(*common, *args).items()}


def errors(est: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Signed relative errors (estimate - measured) / measured, summarised."""
    err = (est - measured) / measured
    return {
        "n": int(err.size),
        "median_abs": float(np.median(np.abs(err))),
        "worst_abs": float(np.max(np.abs(err))),
        "median_signed": float(np.median(err)),
    }


def shape_cells(df: pd.DataFrame, est_col: str) -> pd.DataFrame:
    """T(R, q) / T(R, 1) measured and estimated, per (R, context, q > 1) verify cell."""
    v = df[df["phase"] == "verify"].assign(q=lambda d: d["batch_tokens"] // d["num_seqs"])
    base = v[v["q"] == 1].set_index(["num_seqs", "context_len"])
    rows = []
    for _, row in v[v["q"] > 1].iterrows():
        ref = base.loc[(row["num_seqs"], row["context_len"])]
        measured = row["latency_ms"] / ref["latency_ms"]
        est = row[est_col] / ref[est_col]
        rows.append((row["num_seqs"], row["context_len"], row["q"], measured, est))
    cols = ["R", "context", "q", "measured_ratio", "estimated_ratio"]
    out = pd.DataFrame(rows, columns=cols)
    out["error"] = out["estimated_ratio"] / out["measured_ratio"] - 1
    return out


def r_cells(df: pd.DataFrame, est_col: str) -> pd.DataFrame:
    """T(R, 1) / T(1, 1) measured and estimated, per (R > 1, context)."""
    v = df[(df["phase"] == "verify") & (df["batch_tokens"] == df["num_seqs"])]
    rows = []
    for ctx, g in v.groupby("context_len"):
        one = g[g["num_seqs"] == 1].iloc[0]
        for _, row in g[g["num_seqs"] > 1].iterrows():
            measured = row["latency_ms"] / one["latency_ms"]
            est = row[est_col] / one[est_col]
            rows.append((row["num_seqs"], ctx, measured, est))
    out = pd.DataFrame(rows, columns=["R", "context", "measured_ratio", "estimated_ratio"])
    out["error"] = out["estimated_ratio"] / out["measured_ratio"] - 1
    return out


def passing(cells: pd.DataFrame) -> dict[str, float]:
    ok = cells["error"].abs() <= SHAPE_TOL
    return {
        "cells": int(len(cells)),
        "within_10pct": int(ok.sum()),
        "worst_error": float(cells["error"].abs().max()),
        "median_abs_error": float(cells["error"].abs().median()),
    }


def draft_ratio(target: pd.DataFrame, drafter: pd.DataFrame) -> dict[str, float]:
    m = target.merge(drafter, on=KEY, suffixes=("", "_d"))
    ratio = m["latency_ms_d"] / m["latency_ms"]
    return {
        "n": int(len(ratio)),
        "median": float(ratio.median()),
        "min": float(ratio.min()),
        "max": float(ratio.max()),
        "default": DEFAULT_DRAFT_RATIO,
    }


def repeat_diff(first: pd.DataFrame, second: pd.DataFrame) -> dict[str, float]:
    m = first.merge(second, on=KEY, suffixes=("", "_2"))
    diff = (m["latency_ms_2"] - m["latency_ms"]) / m["latency_ms"]
    return {"n": int(len(diff)), "median_abs": float(diff.abs().median()),
            "worst_abs": float(diff.abs().max())}  # fmt: skip


def kernel_class(name: str) -> str:
    """The class of a CUDA kernel by its name: GEMMs, attention, the DynamicCache's
    concatenation, or everything else (unfused elementwise, reductions, copies, masks)."""
    low = name.lower()
    if any(k in low for k in ("nvjet", "cublas", "gemm", "cutlass")):
        return "gemm"
    if any(k in low for k in ("sdpa", "flash", "fmha", "attention")):
        return "attention"
    if "catarraybatchedcopy" in low:
        return "cache_concat"
    return "other"


def breakdown(path: Path) -> pd.DataFrame:
    """run3's per-kernel times by class, beside the estimate's own parts at the same point."""
    rows = []
    for label, point in json.loads(path.read_text()).items():
        phase, r, q, ctx = label.split()
        r, q, ctx = (int(x.split("=")[1]) for x in (r, q, ctx))
        classes = {"gemm": 0.0, "attention": 0.0, "cache_concat": 0.0, "other": 0.0}
        for name, ms in point["kernels_ms"].items():
            classes[kernel_class(name)] += ms
        one = pd.DataFrame(
            {"phase": [phase], "batch_tokens": [r * q], "num_seqs": [r], "context_len": [ctx]}
        )
        parts = {k: float(v[0]) for k, v in parts_ms(one).items()}
        rows.append({
            "point": label, "measured_total": point["total_ms"], **classes,
            "est_gemm": parts["linear"] + parts["lm_head"],
            "est_attention": parts["attention"],
            "est_elementwise": parts["elementwise"],
        })  # fmt: skip
    return pd.DataFrame(rows)


def load(name: str) -> pd.DataFrame:
    df = read_profile(ROOT / name)[[*KEY, "latency_ms", "latency_ms_p10", "latency_ms_p90"]]
    parts = parts_ms(df)
    share = parts["attention"] / sum(parts.values())
    return df.assign(est_full=estimate(df, 1.0), est_gpu=estimate(df, 0.0), attention=share)


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def table(df: pd.DataFrame, cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for _, row in df[cols].iterrows():
        cells = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    events = load("profiles/h200-qwen3-8b.csv")
    kernels = load("profiles/h200-qwen3-8b-kernels.csv")
    repeat = read_profile(HERE / "run2" / "h200-qwen3-8b-repeat.csv")
    drafter_ev = read_profile(ROOT / "profiles/h200-qwen3-8b-drafter.csv")
    drafter_k = read_profile(ROOT / "profiles/h200-qwen3-8b-kernels-drafter.csv")
    drafter_rep = read_profile(HERE / "run2" / "h200-qwen3-8b-repeat-drafter.csv")

    result: dict[str, dict] = {"level": {}, "shape": {}, "draft_cost": {}, "repeat": {}}
    for phase in ("verify", "prefill"):
        ev, k = events[events["phase"] == phase], kernels[kernels["phase"] == phase]
        lat = ev["latency_ms"].to_numpy()
        between = (ev["est_gpu"] <= lat) & (lat <= ev["est_full"])
        result["level"][f"events_{phase}"] = {
            "full": errors(ev["est_full"].to_numpy(), lat),
            "gpu_only": errors(ev["est_gpu"].to_numpy(), lat),
            "between_gpu_only_and_full": int(between.sum()),
        }
        result["level"][f"kernels_{phase}"] = {
            "gpu_only": errors(k["est_gpu"].to_numpy(), k["latency_ms"].to_numpy())
        }
    shape_ev, shape_k = shape_cells(events, "est_full"), shape_cells(kernels, "est_gpu")
    r_ev, r_k = r_cells(events, "est_full"), r_cells(kernels, "est_gpu")
    result["shape"] = {
        "events_vs_full_tokens": passing(shape_ev),
        "kernels_vs_gpu_only_tokens": passing(shape_k),
        "events_vs_full_seqs": passing(r_ev),
        "kernels_vs_gpu_only_seqs": passing(r_k),
    }
    result["draft_cost"] = {
        "events": draft_ratio(events, drafter_ev),
        "kernels": draft_ratio(kernels, drafter_k),
    }
    result["repeat"] = {
        "target_events": repeat_diff(events, repeat),
        "drafter_events": repeat_diff(drafter_ev, drafter_rep),
    }
    split = breakdown(HERE / "run3" / "breakdown.json")
    result["breakdown_ms"] = split.set_index("point").round(3).to_dict(orient="index")
    gpu_target = result["level"]["kernels_verify"]["gpu_only"]["median_abs"]
    result["gpu_work_target_met"] = bool(gpu_target < LEVEL_TARGET)
    (HERE / "comparison.json").write_text(json.dumps(result, indent=1) + "\n")

    points = kernels.assign(
        events_ms=events["latency_ms"].to_numpy(),
        err_full_vs_events=(events["est_full"] - events["latency_ms"]) / events["latency_ms"],
        err_gpu_vs_kernels=(kernels["est_gpu"] - kernels["latency_ms"]) / kernels["latency_ms"],
    ).rename(columns={"latency_ms": "kernels_ms"})
    cols = ["phase", "batch_tokens", "num_seqs", "context_len", "events_ms", "est_full",
            "err_full_vs_events", "kernels_ms", "est_gpu", "err_gpu_vs_kernels",
            "attention"]  # fmt: skip
    md = ["# H200 estimate vs measured (generated by compare.py; rules in README.md)", ""]
    md += ["```json", json.dumps(result, indent=1), "```", "", "## Every point", ""]
    md += [table(points, cols), "", "## Shape: T(R, q) / T(R, 1), kernels vs GPU-only", ""]
    md += [table(shape_k, list(shape_k.columns)), "", "## Shape: events vs full estimate", ""]
    md += [table(shape_ev, list(shape_ev.columns)), "", "## R-dependence: T(R, 1) / T(1, 1)", ""]
    md += ["kernels vs GPU-only:", "", table(r_k, list(r_k.columns)), ""]
    md += ["events vs full:", "", table(r_ev, list(r_ev.columns)), ""]
    md += ["## Kernel classes (run 3) vs the estimate's parts, ms per step", ""]
    md += [table(split, list(split.columns)), ""]
    (HERE / "comparison.md").write_text("\n".join(md))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
