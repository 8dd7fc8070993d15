"""Fitting the engine presets' host terms on published end-to-end runs (the rules:
docs/engine-v2-rules.md; the v1 readings of the rows: docs/engine-fit-rules.md).

Each plain-decoding row the rules admit is one measured decode step (median ITL, or mean TPOT
with the other requests' prefill work in it) at its Little's-law batch R and mean context. Its
GPU work comes from `gpu_model.step_costs` as fitted on Vidur's operator data (not refitted
here), at the tokens the engine's CUDA graphs run and with the collectives it calls, an MoE
layer priced by its parts (`moe`). What the GPU work leaves is fitted in two stages per engine
version, each least squares on relative error weighted by the rows' stated noise:

- the serialised host time per step and per running sequence (non-negative), on its dense
  rows;
- then the one scale on the grouped GEMMs' bandwidth-efficiency prior (`moe_gemm_scale`), on
  its MoE rows, bounded to `moe.SCALE_RANGE` (docs/engine-v2-rules.md, addendum 3, item 2).

A version without dense rows takes host terms pooled over the engines; one without MoE rows
takes the prior unscaled (TensorRT-LLM, current vLLM) or, in a fold that removed its own,
the scale pooled over the other engines' MoE rows (a transfer). Current vLLM takes vLLM 0.8.4's
host work as overlapped (addendum 5). Leave-one-source-out folds refit without each source.
Deterministic: no sampling, no starting point.
"""

from __future__ import annotations

import csv
import re
from dataclasses import asdict, dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dsim.hardware import gpu_fit, memory, moe
from dsim.hardware.arch import Parallel, step_experts
from dsim.hardware.gpu_model import StepOverhead
from dsim.hardware.graph_priors import graphs
from dsim.hardware.pricing import Pricing, pricing

DATA = "data/engines/published_benchmarks.csv"
EVAL = "data/engines/evaluation_rows.csv"
FITTED = ("vllm-0.8", "sglang", "trtllm")
MOE_FITTED = ("vllm-0.8", "sglang")  # the versions with DeepSeek rows (addendum 3, item 2)
MTBENCH_CONTEXT = 1000  # the MT-Bench row's context (its lengths are not published)
SETUPS = {  # setup of a row: (zoo model, gpu, tp, weight dtype)
    "deepseek": ("deepseek-v3", "h200", 8, "fp8"),
    "nim": ("llama3.3-70b", "h100", 2, "fp8"),
    "pr": ("llama3.3-70b", "h100", 8, "bf16"),
    "datacrunch": ("llama3.3-70b", "h200", 4, "bf16"),
    "docs": ("llama3-8b", "h100", 1, "bf16"),
    "b200": ("llama3.1-70b", "b200", 4, "bf16"),
    "qwen3moe-tp4": ("qwen3-30b-a3b", "h100", 4, "bf16"),  # addendum 8: evaluation only
    "qwen3moe-tp2": ("qwen3-30b-a3b", "h100", 2, "bf16"),
}
# Published row -> (engine version, source fold, setup): the rules' plain table.
P_ROWS: dict[int, tuple[str, str, str]] = {
    **{i: ("vllm-0.8", "vLLM logs", "deepseek") for i in (0, 1, 2, 8, 9)},
    **{i: ("sglang", "SGLang logs", "deepseek") for i in (4, 5, 6, 10)},
    **{i: ("trtllm", "NIM", "nim") for i in range(11, 17)},
    17: ("sglang", "SGLang PR", "pr"),
}
E_FITTED = (130, 131, 132, 135, 136, 137, 138)  # datacrunch's 70B TP 4 H200 series in scope
E_OVERLOAD = (133, 134)  # the rules' exclusion 1: reported, not fitted
E_B200 = (143, 144, 145)  # vLLM V1 on 4x B200: evaluation only (addendum 3, item 5)
SONNET = (550, 150)  # `vllm bench serve --dataset-name sonnet`'s default input and output
FOLDS = ("vLLM logs", "SGLang logs", "NIM", "SGLang PR", "datacrunch")


def raw_rows() -> pd.DataFrame:
    return pd.read_csv(Path(str(resources.files("dsim.hardware").joinpath(DATA))))


@cache
def eval_rows() -> tuple[dict, ...]:
    """The evaluation rows of docs/engine-v2-rules.md (E<i>: row i, 0-based)."""
    path = Path(str(resources.files("dsim.hardware").joinpath(EVAL)))
    with path.open() as f:
        return tuple(csv.DictReader(f))


def _mean_itl_s(row: pd.Series) -> float:
    if not pd.isna(row["mean_tpot_ms"]):
        return float(row["mean_tpot_ms"]) / 1e3
    found = re.search(r"mean ITL ([0-9.]+) ms", str(row["notes"]))
    return float(found.group(1)) / 1e3 if found else float("nan")


@dataclass(frozen=True)
class PlainRow:
    """One plain decoding row as the rules read it: what it measured (seconds a step, by
    `metric`), at R sequences and context C, under which engine version, setup and fold, its
    noise, the other requests' prefill work a step carries (NIM's mean TPOT) and whether it is
    fitted (else why not)."""

    row: str
    version: str
    fold: str
    setup: str
    metric: str
    measured_s: float
    seqs: float
    context: float
    noise: float
    prefill_s: float = 0.0
    fitted: bool = True
    excluded: str = ""


def _notes_number(row: dict, label: str) -> float:
    """A number the row's notes give after `label`."""
    return float(re.search(re.escape(label) + r"([0-9.]+)", row["notes"]).group(1))


def _p_row(i: int, version: str, fold: str, setup: str) -> PlainRow:
    row = raw_rows().iloc[i]
    noise = 0.05
    if setup == "pr":  # TPOT = 1 / tok/s at batch 1
        measured, metric, noise = 1.0 / float(row["output_tok_s"]), "TPOT = 1 / tok/s", 0.10
        seqs, context = 1.0, float(MTBENCH_CONTEXT)
    else:
        mean = _mean_itl_s(row)
        seqs = float(row["output_tok_s"]) * mean
        context = float(row["input_len"]) + float(row["output_len"]) / 2
        measured, metric = (
            (mean, "mean TPOT")
            if setup == "nim"
            else (float(row["median_itl_ms"]) / 1e3, "median ITL")
        )
    prefill = 0.0
    if setup == "nim":  # one prompt's prefill per output token of each other request
        n = float(row["input_len"])
        one = float(gpu_costs("nim", version, n, 1.0, n, True)["gpu"][0])
        prefill = max(seqs - 1.0, 0.0) / float(row["output_len"]) * one
    return PlainRow(
        row=f"P{i}",
        version=version,
        fold=fold,
        setup=setup,
        metric=metric,
        measured_s=measured,
        seqs=seqs,
        context=context,
        noise=noise,
        prefill_s=prefill,
    )


def _e_row(i: int) -> PlainRow:
    """E130-E138 (SGLang, Llama-3.x-70B, 4x H200) and E0 (SGLang docs, 8B, batch 1 assumed)."""
    ev = eval_rows()
    r = ev[i]
    mtb = float(MTBENCH_CONTEXT)
    if i == 0:
        return PlainRow(
            row="E0",
            version="sglang",
            fold="SGLang docs",
            setup="docs",
            metric="TPOT = 1 / tok/s (batch assumed 1)",
            noise=0.10,
            measured_s=1 / float(r["output_tok_s"]),
            seqs=1.0,
            context=mtb,
        )
    itl = float(r["median_itl_ms"]) / 1e3
    if i <= 134:  # random 1024/1024, uniform lengths: mean input 512
        out_len = _notes_number(r, "mean output tokens/request = ")
        seqs, context = float(r["output_tok_s"]) * itl, 512 + out_len / 2
    elif i <= 136:  # ShareGPT: output from the notes, input not stated
        seqs, context = float(r["output_tok_s"]) * itl, mtb
    else:  # no tok/s: rate x E135/E136's mean output x median TPOT
        out_len = _notes_number(ev[i - 2], "mean output tokens/request = ")
        seqs, context = float(r["request_rate"]) * out_len * float(r["median_tpot_ms"]) / 1e3, mtb
    return PlainRow(
        row=f"E{i}",
        version="sglang",
        fold="datacrunch",
        setup="datacrunch",
        metric="median ITL",
        noise=0.10,
        measured_s=itl,
        seqs=seqs,
        context=context,
    )


def setup_pricing(setup: str, version: str) -> Pricing:
    """A row setup's pricing under an engine version's graphs, custom all-reduce, fusion,
    decode attention kernel and the KV dtype it gives the checkpoint by default (TensorRT-LLM
    caches an fp8 checkpoint's KV in fp8)."""
    model, gpu, tp, dtype = SETUPS[setup]
    par = Parallel(tp=tp, dtype=dtype, kv_dtype=memory.rule(version).kv_dtype("auto", dtype))
    return pricing(model, gpu, par, True, graphs(version, gpu), version)


def gpu_costs(setup: str, version: str, tokens, seqs, context, prefill) -> dict:
    """`step_costs` of a setup under an engine version, without the engine's terms."""
    price = setup_pricing(setup, version)
    arrays = [np.atleast_1d(np.asarray(v, np.float64)) for v in (tokens, seqs, context)]
    pre = np.broadcast_to(np.asarray(prefill, bool), arrays[0].shape)
    return price.costs(StepOverhead(0.0, 0.0), *arrays, pre)


def moe_memory_s(setup: str, version: str, tokens: float) -> float:
    """A plain decode step's grouped-GEMM memory seconds at scale 1 over its MoE layers (one
    token a request), at the tokens the engine's graphs run: what the engine's scale divides
    (`moe.gemm_memory_seconds`)."""
    price = setup_pricing(setup, version)
    n = np.array([tokens])
    run = n if price.graphs is None else price.graphs.padded(n, n, np.array([False]))
    if not price.arch.moe:
        return 0.0
    arch = price.arch
    touched = step_experts(arch, run, n, n)  # one token a request
    one = moe.gemm_memory_seconds(arch, price.par, price.gpu, run, touched)
    return float(arch.moe_layers * np.asarray(one).sum())


def _b200_row(i: int) -> PlainRow:
    """E143-E145: Llama-3.1-70B TP 4 on B200 under vLLM V1 (~0.10, July 2025; read with the
    vllm-0.8 preset, the V1 version dsim has, no async scheduling), Poisson 1/5/10 req/s of
    sonnet requests: R by Little's law (rate x (TTFT + output x TPOT)), context input + half
    the output. Evaluation only: the B200 borrows H100's calibration."""
    r = eval_rows()[i]
    tpot, rate = float(r["median_tpot_ms"]) / 1e3, float(r["request_rate"])
    inp, out = SONNET
    seqs = rate * (float(r["ttft_median_ms"]) / 1e3 + out * tpot)
    return PlainRow(
        row=f"E{i}",
        version="vllm-0.8",
        fold="vLLM PR #20759",
        setup="b200",
        metric="median TPOT",
        noise=0.10,
        measured_s=tpot,
        seqs=seqs,
        context=inp + out / 2,
    )


@cache
def fit_rows() -> pd.DataFrame:
    """Every plain row of the rules: measured seconds, R, C, GPU work, the grouped GEMMs'
    memory time, the other requests' prefill work (NIM's mean TPOT), and whether it is
    fitted."""
    rows = [_p_row(i, *v) for i, v in P_ROWS.items()]
    rows += [_e_row(i) for i in E_FITTED]
    rows += [
        replace(_e_row(i), fitted=False, excluded="overload (exclusion 1)") for i in E_OVERLOAD
    ]
    rows += [replace(_e_row(0), fitted=False, excluded="evaluation only (batch assumed)")]
    b200 = "evaluation only (B200, H100's calibration borrowed)"
    rows += [replace(_b200_row(i), fitted=False, excluded=b200) for i in E_B200]
    out = []
    for row in rows:
        costs = gpu_costs(row.setup, row.version, row.seqs, row.seqs, row.context, False)
        out.append(
            asdict(row)
            | {
                "gpu_s": float(costs["gpu"][0]),
                "padding_s": float(costs["padding"][0]),
                "launches_s": float(costs["launches"][0]),
                "moe_mem_s": moe_memory_s(row.setup, row.version, row.seqs),
            }
        )
    return pd.DataFrame(out)


def _nnls(rows: pd.DataFrame, columns: list[np.ndarray], fixed: np.ndarray) -> list[float]:
    """Non-negative terms on `columns` minimising noise-weighted relative error of what the
    GPU work and `fixed` leave of each measured step."""
    meas = rows["measured_s"].to_numpy()
    gap = meas - rows["gpu_s"].to_numpy() - rows["prefill_s"].to_numpy() - fixed
    weight = 1.0 / (meas * rows["noise"].to_numpy())
    terms, _ = nnls(np.column_stack(columns) * weight[:, None], gap * weight)
    return [float(t) for t in terms]


def _host(rows: pd.DataFrame) -> StepOverhead:
    """Serialised host time per step and per sequence, fitted on dense rows."""
    step, seq = _nnls(rows, [np.ones(len(rows)), rows["seqs"].to_numpy()], np.zeros(len(rows)))
    return StepOverhead(0.0, seq, per_step_s=step)


def moe_scale(rows: pd.DataFrame, host: StepOverhead) -> float:
    """The grouped GEMMs' scale on MoE rows after `host`: their decode steps are memory-bound,
    so a step is its GPU work at scale 1 plus memory x (1/scale - 1), linear in 1/scale; the
    weighted least-squares 1/scale, bounded to `moe.SCALE_RANGE` (the loss is convex in it)."""
    meas = rows["measured_s"].to_numpy()
    mem = rows["moe_mem_s"].to_numpy()
    fixed = host.per_step_s + host.per_seq_s * rows["seqs"].to_numpy()
    gap = meas - rows["gpu_s"].to_numpy() - rows["prefill_s"].to_numpy() - fixed + mem
    weight = (1.0 / (meas * rows["noise"].to_numpy())) ** 2
    inverse = float(np.sum(weight * mem * gap) / np.sum(weight * mem * mem))
    low, high = moe.SCALE_RANGE
    return float(np.clip(1.0 / inverse, low, high)) if inverse > 0 else high


def fit_presets(rows: pd.DataFrame) -> dict[str, StepOverhead]:
    """Each engine version's terms fitted on `rows` (the fitted ones): host time on its dense
    rows, then its grouped-GEMM scale on its MoE rows (module docstring: pooled or prior
    where a version has no such rows); current vLLM's host work overlapped, its MoE kernels
    the prior's (measured on vLLM's current fused-MoE kernels)."""
    rows = rows[rows["fitted"]]
    dense, moe_rows = rows[rows["moe_mem_s"] == 0], rows[rows["moe_mem_s"] > 0]
    pooled_host = _host(dense)
    out = {}
    for version in FITTED:
        mine = dense[dense["version"] == version]
        host = _host(mine) if len(mine) else pooled_host
        mine_moe = moe_rows[moe_rows["version"] == version]
        scale = 1.0
        if version in MOE_FITTED:
            scale = moe_scale(mine_moe if len(mine_moe) else moe_rows, host)
        out[version] = replace(host, moe_gemm_scale=scale)
    vllm = out["vllm-0.8"]
    hidden = dict(overlap_step_s=vllm.per_step_s, overlap_seq_s=vllm.per_seq_s)
    out["vllm"] = replace(vllm, per_step_s=0.0, per_seq_s=0.0, moe_gemm_scale=1.0, **hidden)
    return out


def predict(rows: pd.DataFrame, terms: dict[str, StepOverhead]) -> np.ndarray:
    """Each row's step under its version's terms: max(GPU, overlapped) + serialised."""
    out = np.empty(len(rows))
    for pos, (_, row) in enumerate(rows.iterrows()):
        t = terms[row["version"]]
        moe_extra = row["moe_mem_s"] * (1.0 / t.moe_gemm_scale - 1.0)
        gpu = row["gpu_s"] + moe_extra + row["prefill_s"]
        hidden = t.overlap_step_s + t.overlap_seq_s * row["seqs"] + row["launches_s"]
        out[pos] = max(gpu, hidden) + t.per_step_s + t.per_seq_s * row["seqs"]
    return out


@cache
def presets() -> dict[str, StepOverhead]:
    """The shipped terms: fitted on every admitted row."""
    return fit_presets(fit_rows())


@cache
def loso() -> dict:
    """Leave-one-source-out: each fold's rows predicted by terms refitted without them; the
    rows not fitted (overload, evaluation only) predicted by the full fit."""
    rows = fit_rows()
    pred = np.full(len(rows), np.nan)
    folds = {}
    for fold in FOLDS:
        test = (rows["fold"] == fold).to_numpy() & rows["fitted"].to_numpy()
        refit = fit_presets(rows[~test])
        pred[test] = predict(rows[test], refit)
        err = pred[test] / rows["measured_s"].to_numpy()[test] - 1.0
        folds[fold] = gpu_fit.error_summary(err) | {
            "terms": {name: asdict(t) for name, t in refit.items()}
        }
    rest = ~rows["fitted"].to_numpy()
    pred[rest] = predict(rows[rest], presets())
    in_sample = predict(rows, presets())
    table = rows.assign(
        predicted_s=pred,
        error=pred / rows["measured_s"] - 1.0,
        in_sample_error=in_sample / rows["measured_s"] - 1.0,
        gpu_only_error=(rows["gpu_s"] + rows["prefill_s"]) / rows["measured_s"] - 1.0,
    )
    scored = table[table["fitted"]]
    return {
        "folds": folds,
        "all": gpu_fit.error_summary(scored["error"].to_numpy()),
        "gpu_only_residual": residuals(table),
        "rows": table.round(6).to_dict("records"),
    }


def residuals(table: pd.DataFrame) -> dict:
    """Per setup: the share of the measured step the GPU work leaves (before any term)."""
    out = {}
    for setup, part in table[table["fitted"]].groupby("setup"):
        share = 1.0 - (part["gpu_s"] + part["prefill_s"]) / part["measured_s"]
        out[setup] = {
            "median": round(float(share.median()), 4),
            "min": round(float(share.min()), 4),
            "max": round(float(share.max()), 4),
        }
    return out


def record() -> dict:
    """What a sidecar records about the engine fit: data, rules, terms, held-out errors."""
    return {
        "data": "dsim/hardware/data/engines/ (README: sources)",
        "rules": "docs/engine-v2-rules.md",
        "rows": sorted(fit_rows()["row"]),
        "terms_s": {name: asdict(t) for name, t in presets().items()},
        "leave_one_source_out": {
            "folds": {k: {m: v[m] for m in v if m != "terms"} for k, v in loso()["folds"].items()},
            "all": loso()["all"],
            "gpu_only_residual": loso()["gpu_only_residual"],
        },
    }
