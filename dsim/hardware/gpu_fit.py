"""Calibrating the GPU step-time model on measured public data (docs/design.md, Calibrated
GPU estimates).

1. Operator efficiencies (`KernelFit`) per GPU, fitted on Vidur's per-operator CUDA times of
   Llama-2-7B, CodeLlama-34B and Qwen-72B at TP 1/2/4/8 (linear operators: least squares on
   log time; elementwise operators: non-negative least squares on relative error).
2. The per-step overhead (`StepOverhead`), fitted on Splitwise's end-to-end vLLM step times,
   and evaluated on end-to-end steps held out from that fit (one device or one model left out).
Everything is deterministic: fixed starting point, no sampling.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls

from dsim.hardware import zoo
from dsim.hardware.arch import Arch, Parallel, layer_linears
from dsim.hardware.gpu_model import (
    ACT_BYTES,
    GPUS,
    AllReduce,
    Gpu,
    KernelFit,
    StepOverhead,
    elementwise_bytes,
    linear_time,
    step_parts,
)

DATA = "data/gpu"
VIDUR_MODELS = (
    "meta-llama/Llama-2-7b-hf",
    "codellama/CodeLlama-34b-Instruct-hf",
    "Qwen/Qwen-72B",
)
LINEAR_OPS = {
    "attn_pre_proj": "qkv",
    "attn_post_proj": "o",
    "mlp_up_proj": "mlp_up",
    "mlp_down_proj": "mlp_down",
}
ELEMENTWISE_OPS = {
    "input_layernorm": "norm",
    "post_attention_layernorm": "norm",
    "attn_rope": "rope",
    "mlp_act": "act",
    "add": "add",
}
SPLITWISE = "splitwise/perf_model_public_part.csv"
SPLITWISE_MODELS = {"llama2-70b": "llama2-70b", "bloom-176b": "bloom-176b"}
SPLITWISE_GPUS = {"a100-80gb": "a100", "h100-80gb": "h100"}  # the power-capped H100 is left out


def data_path(relative: str) -> Path:
    return Path(str(resources.files("dsim.hardware").joinpath(DATA, relative)))


def vidur_arch(row: pd.Series) -> Arch:
    h, heads = int(row["n_embd"]), int(row["n_head"])
    return Arch(
        name="vidur",
        layers=1,
        hidden=h,
        heads=heads,
        kv_heads=int(row["n_kv_head"]),
        head_dim=h // heads,
        intermediate=int(row["n_expanded_embd"]),
        vocab=int(row["vocab_size"]),
        gated=bool(row["use_gated_mlp"]),
    )


@cache
def operator_rows(gpu: str) -> pd.DataFrame:
    """One row per (model, TP, tokens, operator): measured median seconds, flops, bytes."""
    out = []
    for model in VIDUR_MODELS:
        df = pd.read_csv(data_path(f"vidur/compute/{gpu}/{model}/mlp.csv.gz"))
        arch = vidur_arch(df.iloc[0])
        for tp, part in df.groupby("num_tensor_parallel_workers"):
            par = Parallel(tp=int(tp))
            n = part["num_tokens"].to_numpy(np.float64)
            shapes = {name: (p, i, o) for name, p, i, o in layer_linears(arch, par, True)}
            for op, name in LINEAR_OPS.items():
                params, d_in, d_out = shapes[name]
                nbytes = params * ACT_BYTES + n * (d_in + d_out) * ACT_BYTES
                out.append(_rows(model, tp, n, op, "linear", 2.0 * n * params, nbytes, part))
            elem = elementwise_bytes(arch, par, n, dense_mlp=True)
            for op, name in ELEMENTWISE_OPS.items():
                out.append(_rows(model, tp, n, op, "elementwise", 0.0 * n, elem[name], part))
    return pd.concat(out, ignore_index=True)


def _rows(model, tp, n, op, kind, flops, nbytes, part) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": model,
            "tp": int(tp),
            "tokens": n,
            "op": op,
            "kind": kind,
            "flops": flops,
            "bytes": nbytes,
            "seconds": part[f"time_stats.{op}.median"].to_numpy(np.float64) / 1e3,
        }
    )


@cache
def fit_kernels(gpu: str) -> KernelFit:
    """Operator efficiencies of one GPU (a100 or h100) from Vidur's operator rows."""
    spec = GPUS[gpu]
    rows = operator_rows(gpu)
    lin = rows[(rows["kind"] == "linear") & (rows["seconds"] > 0)]
    flops, nbytes = lin["flops"].to_numpy(), lin["bytes"].to_numpy()
    log_t = np.log(lin["seconds"].to_numpy())

    def residual(x: np.ndarray) -> np.ndarray:
        fit = KernelFit(x[0], x[1], x[2], x[3] * 1e-6, 0.0, 1.0)
        return np.log(linear_time(fit, spec, flops, nbytes, spec.flops)) - log_t

    sol = least_squares(
        residual, x0=[0.7, 0.8, 2.0, 5.0], bounds=([0.05, 0.05, 1.0, 0.0], [1.0, 1.0, 20.0, 100.0])
    )
    el = rows[(rows["kind"] == "elementwise") & (rows["seconds"] > 0)]
    t = el["seconds"].to_numpy()
    design = (
        np.column_stack([np.ones_like(t), el["bytes"].to_numpy() / spec.bandwidth]) / t[:, None]
    )
    (kernel, inv_frac), _ = nnls(design, np.ones_like(t))
    fc, fm, p, k_us = (float(v) for v in sol.x)
    return KernelFit(fc, fm, p, k_us * 1e-6, float(kernel), 1.0 / max(float(inv_frac), 1e-9))


@cache
def allreduce_medians(gpu: str) -> pd.Series:
    """Vidur's NCCL all-reduce median seconds within one DGX node, by (GPU count, size)."""
    df = pd.read_csv(data_path(f"vidur/network/{gpu}_dgx/all_reduce.csv.gz"))
    df = df[df["devices_per_node"] >= df["num_workers"]]
    return df.groupby(["num_workers", "size"])["time_stats.all_reduce.median"].median() / 1e3


@cache
def allreduce_table(gpu: str) -> AllReduce:
    """Latency and bandwidth per GPU count, fitted (non-negative least squares on relative
    error) on the measured medians, 2 KiB..64 MiB."""
    fits = {}
    for workers, part in allreduce_medians(gpu).groupby(level=0):
        size = part.index.get_level_values(1).to_numpy(np.float64)
        secs = part.to_numpy(np.float64)
        design = np.column_stack([np.ones_like(size), size]) / secs[:, None]
        (latency, inv_bw), _ = nnls(design, np.ones_like(secs))
        fits[int(workers)] = (float(latency), 1.0 / max(float(inv_bw), 1e-30))
    return AllReduce(fits, gpu)


def allreduce_errors(gpu: str) -> dict:
    """The all-reduce line's relative error on the medians it was fitted on, per GPU count."""
    table, out = allreduce_table(gpu), {}
    for workers, part in allreduce_medians(gpu).groupby(level=0):
        size = part.index.get_level_values(1).to_numpy(np.float64)
        err = table.time(size, int(workers)) / part.to_numpy() - 1.0
        out[str(workers)] = error_summary(err)
    return out


@cache
def end_to_end_rows() -> pd.DataFrame:
    """Splitwise step times (median of repeats) as single steps the model can price.

    Decode: token_time is a decode step of batch_size sequences, averaged while the context
    grows from prompt_size to prompt_size + token_size (mean context used). Prefill: only
    batch_size 1, where prompt_time is one step; larger prompt batches exceed that vLLM
    version's per-step token budget and were split into steps the table does not record.
    """
    df = pd.read_csv(data_path(SPLITWISE))
    df = df[df["hardware"].isin(list(SPLITWISE_GPUS))]
    keys = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    med = df.groupby(keys)[["prompt_time", "token_time"]].median().reset_index()
    base = {
        "model": med["model"].map(SPLITWISE_MODELS),
        "gpu": med["hardware"].map(SPLITWISE_GPUS),
        "tp": med["tensor_parallel"].astype(int),
    }
    decode = pd.DataFrame(
        {
            **base,
            "phase": "decode",
            "tokens": med["batch_size"],
            "seqs": med["batch_size"],
            "context": med["prompt_size"] + med["token_size"] / 2,
            "measured_s": med["token_time"] / 1e3,
        }
    )
    one = med["batch_size"] == 1
    first = ~med[one].duplicated(["model", "hardware", "tensor_parallel", "prompt_size"])
    pre = med[one][first]
    prefill = pd.DataFrame(
        {
            "model": pre["model"].map(SPLITWISE_MODELS),
            "gpu": pre["hardware"].map(SPLITWISE_GPUS),
            "tp": pre["tensor_parallel"].astype(int),
            "phase": "prefill",
            "tokens": pre["prompt_size"],
            "seqs": 1,
            "context": pre["prompt_size"],
            "measured_s": pre["prompt_time"] / 1e3,
        }
    )
    return pd.concat([decode, prefill], ignore_index=True)


def model_parts(rows: pd.DataFrame) -> pd.DataFrame:
    """Each end-to-end row's modelled time without the step overhead, and its layer count."""
    base, layers = np.zeros(len(rows)), np.zeros(len(rows))
    for (model, gpu, tp), idx in rows.groupby(["model", "gpu", "tp"]).groups.items():
        arch = zoo.load_arch(model)
        part = rows.loc[idx]
        parts = step_parts(
            arch,
            Parallel(tp=int(tp)),
            GPUS[gpu],
            fit_kernels(gpu),
            allreduce_table(gpu),
            part["tokens"].to_numpy(np.float64),
            part["seqs"].to_numpy(np.float64),
            part["context"].to_numpy(np.float64),
            (part["phase"] == "prefill").to_numpy(),
        )
        pos = rows.index.get_indexer(idx)
        base[pos] = sum(parts.values())
        layers[pos] = arch.layers
    return rows.assign(base_s=base, layers=layers)


def fit_overhead(rows: pd.DataFrame) -> StepOverhead:
    """Per-layer and per-sequence step overhead (>= 0) minimising relative error on `rows`."""
    gap = rows["measured_s"].to_numpy() - rows["base_s"].to_numpy()
    meas = rows["measured_s"].to_numpy()
    design = np.column_stack([rows["layers"].to_numpy(), rows["seqs"].to_numpy()]) / meas[:, None]
    (per_layer, per_seq), _ = nnls(design, gap / meas)
    return StepOverhead(float(per_layer), float(per_seq))


def predict(rows: pd.DataFrame, overhead: StepOverhead) -> np.ndarray:
    return (
        rows["base_s"].to_numpy()
        + (
            overhead.per_layer_s * rows["layers"].to_numpy() + overhead.per_seq_s * rows["seqs"]
        ).to_numpy()
    )


FOLDS = {
    "device a100 held out": ("gpu", "a100"),
    "device h100 held out": ("gpu", "h100"),
    "model llama2-70b held out": ("model", "llama2-70b"),
    "model bloom-176b held out": ("model", "bloom-176b"),
}


def error_summary(err: np.ndarray) -> dict:
    """Count, median and max |relative error| and mean signed error of a fit's held-out rows."""
    if err.size == 0:
        return {"n": 0}
    a = np.abs(err)
    return {
        "n": int(a.size),
        "median_abs_error": float(np.median(a)),
        "max_abs_error": float(a.max()),
        "mean_signed_error": float(err.mean()),
    }


@cache
def evaluation() -> dict:
    """Held-out relative errors of end-to-end steps: refit the overhead without each fold."""
    rows = model_parts(end_to_end_rows())
    folds, pooled = {}, {"decode": [], "prefill": []}
    for name, (column, value) in FOLDS.items():
        test = rows[column] == value
        overhead = fit_overhead(rows[~test])
        held = rows[test]
        err = predict(held, overhead) / held["measured_s"].to_numpy() - 1.0
        folds[name] = {"overhead": asdict(overhead)}
        for phase in ("decode", "prefill"):
            sel = (held["phase"] == phase).to_numpy()
            folds[name][phase] = error_summary(err[sel])
            pooled[phase].append(err[sel])
    overall = {phase: error_summary(np.concatenate(e)) for phase, e in pooled.items()}
    overall["all"] = error_summary(np.concatenate(pooled["decode"] + pooled["prefill"]))
    return {"folds": folds, "held_out": overall}


@dataclass(frozen=True)
class Calibration:
    kernels: KernelFit
    allreduce: AllReduce
    overhead: StepOverhead


@cache
def step_overhead() -> StepOverhead:
    """The shipped per-step overhead: fitted on every end-to-end row."""
    return fit_overhead(model_parts(end_to_end_rows()))


def calibration(gpu: Gpu) -> Calibration:
    return Calibration(fit_kernels(gpu.calibration), borrowed_allreduce(gpu), step_overhead())


def borrowed_allreduce(gpu: Gpu) -> AllReduce:
    """The all-reduce table of the GPU `gpu` is calibrated on, its bandwidth scaled by the
    ratio of the links a TP group uses (`Gpu.group_link`); the table itself where they match."""
    table, measured = allreduce_table(gpu.calibration), GPUS[gpu.calibration]
    ratios = {w: gpu.group_link(w) / measured.group_link(w) for w in table.fits}
    return table if set(ratios.values()) == {1.0} else table.scaled(ratios)


def record() -> dict:
    """What the sidecar records about the calibration: data, fitted values, held-out errors."""
    return {
        "data": {
            "operators": [f"vidur {g} {m}" for g in ("a100", "h100") for m in VIDUR_MODELS],
            "allreduce": ["vidur a100_dgx", "vidur h100_dgx"],
            "end_to_end": "splitwise perf_model_public_part.csv (A100/H100, no power cap)",
            "source": "dsim/hardware/data/gpu/README.md (commits, licences, sha256)",
        },
        "kernels": {g: asdict(fit_kernels(g)) for g in ("a100", "h100")},
        "allreduce_latency_s_bandwidth_bytes_per_s": {
            g: {str(k): v for k, v in allreduce_table(g).fits.items()} for g in ("a100", "h100")
        },
        "allreduce_fit_error": {g: allreduce_errors(g) for g in ("a100", "h100")},
        "step_overhead": asdict(step_overhead()),
        "evaluation": evaluation(),
    }
