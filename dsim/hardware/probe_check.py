"""The engine probes (`dsim.models.engine_probes`) against dsim's estimate of the same work: the
graph padding ratio, the launch time per layer, an EAGLE-3 drafter pass and the rejection
sampler's share of a verify step. The rules and their targets are the GPU profile study's
(Engine probes); the estimate is the `gpu-only` preset's, on the GPU the probes name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dsim.errors import InputError
from dsim.hardware.arch import Parallel
from dsim.hardware.draft_pass import drafter_terms, get_draft_model, pass_gpu
from dsim.hardware.engines import get_engine
from dsim.hardware.estimate_check import LEVEL_TARGET, gpu_only_ms
from dsim.hardware.graph_priors import EAGER_LAYER_S, VLLM_SIZES
from dsim.hardware.pricing import pricing

PADDING_TOL = 0.10  # padding ratio within 10% of the measured one
KERNELS_PER_LAYER = 10  # a fused vLLM decoder layer's kernels (the study's launch rule)
LAUNCH_RANGE_S = (20e-6, 150e-6)  # the eager prior's stated range
LAUNCH_MAX_TOKENS = 64  # the launch rule reads the points where launching, not work, dominates
SAMPLER_SHARE_MAX = 0.05  # a per-round term of 0 holds while sampling is under 5% of a verify
HOST_PASS_S = 0.175e-3  # vLLM's host time per proposer step, the floor under a drafter pass
GPU_KEYS = {"H200": "h200", "H100": "h100"}


def gpu_key(device: str) -> str:
    """dsim's GPU name for a probed device's name (`NVIDIA H100 80GB HBM3` -> `h100`)."""
    for mark, key in GPU_KEYS.items():
        if mark in device.upper():
            return key
    raise InputError(None, None, f"device {device!r}: the probes compare on an H100 or H200 only")


def next_captured(n: int, sizes: tuple[int, ...] = VLLM_SIZES) -> int | None:
    """The captured size a step of n tokens is padded to (None: n is captured, or past all)."""
    above = [s for s in sizes if s >= n]
    return above[0] if above and above[0] != n else None


def _decode_ms(tokens: np.ndarray, context: int, model: str, gpu: str) -> np.ndarray:
    """The gpu-only estimate (ms) of decode steps of `tokens` sequences x 1 token."""
    points = pd.DataFrame({"batch_tokens": tokens, "num_seqs": tokens, "context_len": context})
    return gpu_only_ms(points, model, gpu)


def _spread(errors: pd.Series, tol: float) -> dict[str, Any]:
    a = errors.abs()
    return {
        "points": int(len(a)),
        "within": int((a <= tol).sum()),
        "median_abs": float(a.median()) if len(a) else None,
        "worst_abs": float(a.max()) if len(a) else None,
        "median_signed": float(errors.median()) if len(a) else None,
    }


def padding(graphs: pd.DataFrame, model: str, gpu: str) -> tuple[pd.DataFrame, dict]:
    """Each measured (n, next captured size) pair: both ratios T(s) / T(n) and the error."""
    by_n = graphs.set_index("tokens")
    pairs = [(n, s) for n in by_n.index if (s := next_captured(n)) in by_n.index]
    if not pairs:
        return pd.DataFrame(), {"points": 0}
    n, s = (np.array(v) for v in zip(*pairs, strict=True))
    context = int(graphs["context_len"].iloc[0])
    est_n, est_s = _decode_ms(n, context, model, gpu), _decode_ms(s, context, model, gpu)
    meas_n, meas_s = by_n.loc[n, "graph_ms"].to_numpy(), by_n.loc[s, "graph_ms"].to_numpy()
    t = pd.DataFrame({"tokens": n, "padded_to": s, "measured_ms": meas_n, "padded_ms": meas_s})
    t["padding_ms"] = meas_s - meas_n
    t["measured_ratio"] = meas_s / meas_n
    t["estimated_ratio"] = est_s / est_n
    t["error"] = t["estimated_ratio"] / t["measured_ratio"] - 1
    return t, {**_spread(t["error"], PADDING_TOL), "tolerance": PADDING_TOL}


def launch(graphs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Per point: the eager excess per layer, the host's launch time per layer and per op, and
    the engine-scale launch time per layer, against the eager prior's range."""
    t = graphs[["tokens", "layers", "aten_ops", "eager_ms", "graph_ms"]].copy()
    t["eager_excess_us_per_layer"] = (t["eager_ms"] - t["graph_ms"]) * 1e3 / t["layers"]
    t["launch_us_per_layer"] = graphs["launch_us_per_layer"]
    t["launch_us_per_op"] = graphs["launch_us_per_op"]
    t["engine_launch_us_per_layer"] = t["launch_us_per_op"] * KERNELS_PER_LAYER
    small = t[t["tokens"] <= LAUNCH_MAX_TOKENS]
    median = float(small["engine_launch_us_per_layer"].median()) if len(small) else None
    low, high = (v * 1e6 for v in LAUNCH_RANGE_S)
    return t, {
        "points": int(len(small)),
        "median_engine_launch_us_per_layer": median,
        "median_eager_excess_us_per_layer": float(small["eager_excess_us_per_layer"].median())
        if len(small)
        else None,
        "prior_us_per_layer": EAGER_LAYER_S * 1e6,
        "prior_range_us": [low, high],
        "holds": bool(median is not None and low <= median <= high),
    }


def drafter(rows: pd.DataFrame, model: str, gpu: str) -> tuple[pd.DataFrame, dict]:
    """Each measured EAGLE-3 pass (first, later) against `pass_gpu` under `gpu-only`."""
    preset = get_engine("gpu-only")
    price = pricing(model, gpu, Parallel(), preset.custom_allreduce, preset.graphs, preset.name)
    draft, terms = get_draft_model("eagle3"), drafter_terms(preset.terms, 1.0)
    r = rows["num_seqs"].to_numpy(np.float64)
    c = rows["context_len"].to_numpy(np.float64)
    parts = []
    for name, q in (("first", rows["first_tokens"].to_numpy(np.float64)), ("rest", 1.0)):
        est = pass_gpu(draft, price, terms, r * q, r, c) * 1e3
        parts.append(
            pd.DataFrame(
                {
                    "pass": name,
                    "num_seqs": rows["num_seqs"],
                    "tokens": (r * q).astype(int),
                    "measured_ms": rows[f"{name}_ms"],
                    "estimate_ms": est,
                }  # fmt: skip
            )
        )
    t = pd.concat(parts, ignore_index=True)
    t["error"] = t["estimate_ms"] / t["measured_ms"] - 1
    t["below_host_floor"] = t["measured_ms"] < HOST_PASS_S * 1e3
    spread = _spread(t["error"], LEVEL_TARGET)
    return t, {
        **spread,
        "target_median_abs": LEVEL_TARGET,
        "met": bool(spread["median_abs"] is not None and spread["median_abs"] < LEVEL_TARGET),
        "host_floor_ms": HOST_PASS_S * 1e3,
        "passes_below_host_floor": int(t["below_host_floor"].sum()),
    }


def sampler(rows: pd.DataFrame, model: str, gpu: str, context: int) -> tuple[pd.DataFrame, dict]:
    """Each sampling step as a share of the estimated verify step at (R, K + 1, `context`)."""
    r, k = rows["num_seqs"].to_numpy(np.float64), rows["drafts"].to_numpy(np.float64)
    points = pd.DataFrame({"batch_tokens": r * (k + 1), "num_seqs": r, "context_len": context})
    t = rows[["mode", "num_seqs", "drafts", "ms"]].copy()
    t["verify_estimate_ms"] = gpu_only_ms(points, model, gpu)
    t["share"] = t["ms"] / t["verify_estimate_ms"]
    shares = {m: float(g["share"].median()) for m, g in t.groupby("mode")}
    greedy = shares.get("greedy")
    return t, {
        "median_share": shares,
        "threshold": SAMPLER_SHARE_MAX,
        "per_round_zero_contradicted": bool(greedy is not None and greedy > SAMPLER_SHARE_MAX),
    }


def compare(
    probes: dict[str, Any], model: str = "qwen3-8b"
) -> tuple[dict[str, pd.DataFrame], dict]:
    """Every rule on a probes JSON: the tables by rule and a summary of each."""
    gpu = gpu_key(probes["device"])
    graphs = pd.DataFrame(probes.get("graphs", []))
    tables, summary = {}, {"device": probes["device"], "gpu": gpu, "model": model}
    if len(graphs):
        tables["padding"], summary["padding"] = padding(graphs, model, gpu)
        tables["launch"], summary["launch"] = launch(graphs)
    if probes.get("drafter"):
        tables["drafter"], summary["drafter"] = drafter(pd.DataFrame(probes["drafter"]), model, gpu)
    if probes.get("sampler"):
        context = int(probes["grid"]["decode_context"])
        rows = pd.DataFrame(probes["sampler"])
        tables["sampler"], summary["sampler"] = sampler(rows, model, gpu, context)
    summary["skipped"] = len(probes.get("skipped", []))
    return tables, summary
