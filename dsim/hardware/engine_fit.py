"""Fitting the engine presets' step terms on published end-to-end runs (profiles/README.md,
Engine presets; the rules: docs/engine-fit-rules.md).

Each plain-decoding row the rules admit is one measured decode step (median ITL, or mean TPOT
with the other requests' prefill work in it) at its Little's-law batch R = output tok/s x mean
ITL and mean context input + output/2. The GPU work of that step comes from
`gpu_model.step_parts` as fitted on Vidur's operator data (not refitted here); the engine's
terms are fitted on the gap by non-negative least squares on relative error, with the terms
its data cannot pin set to stated priors. Leave-one-source-out folds refit without each source.
Deterministic: no sampling, no starting point.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dsim.hardware import gpu_fit, zoo
from dsim.hardware.arch import Parallel
from dsim.hardware.gpu_model import GPUS, StepOverhead, step_parts

DATA = "data/engines/published_benchmarks.csv"
# Row number -> (preset, fold, setup). The rules' table: which rows enter which fit.
ROWS: dict[int, tuple[str, str, str]] = {
    **{i: ("vllm", "vLLM 50", "vLLM DeepSeek-R1 8xH200") for i in (0, 1, 2)},
    **{i: ("vllm", "vLLM 200", "vLLM DeepSeek-R1 8xH200") for i in (8, 9)},
    **{i: ("sglang", "SGLang 50", "SGLang DeepSeek-R1 8xH200") for i in (4, 5, 6)},
    10: ("sglang", "SGLang 200", "SGLang DeepSeek-R1 8xH200"),
    **{i: ("trtllm", "NIM", "NIM Llama-3.3-70B 2xH100") for i in range(11, 17)},
    17: ("sglang", "SGLang PR", "SGLang Llama-3.3-70B 8xH100"),
}
FOLDS = ("vLLM 50", "vLLM 200", "SGLang 50", "SGLang 200", "NIM", "SGLang PR", "LMSYS blog")
FITTED = ("vllm", "sglang", "trtllm")
MTBENCH_CONTEXT = 1000  # the MT-Bench row's context (its lengths are not published)
# The long-input rule's budgets: vLLM 0.8.4's API-server max_num_batched_tokens on H100/H200,
# SGLang's chunked_prefill_size in the fitted runs' log.
RULE_BUDGET = {"vLLM": 8192, "SGLang": 8192}
SETUPS = {  # setup of a row: (zoo model, gpu, tp, weight dtype)
    "deepseek": ("deepseek-v3", "h200", 8, "fp8"),
    "nim": ("llama3.3-70b", "h100", 2, "fp8"),
    "pr": ("llama3.3-70b", "h100", 8, "bf16"),
}


def raw_rows() -> pd.DataFrame:
    return pd.read_csv(Path(str(resources.files("dsim.hardware").joinpath(DATA))))


def prefill_share(row: pd.Series) -> float:
    """The long-input rule: share of token gaps that can follow a step carrying prefill."""
    budget = RULE_BUDGET[row["engine"]]
    steps = row["num_prompts"] * row["input_len"] / budget
    return float(steps / (steps + row["output_len"]))


def _mean_itl_s(row: pd.Series) -> float:
    if not pd.isna(row["mean_tpot_ms"]):
        return float(row["mean_tpot_ms"]) / 1e3
    found = re.search(r"mean ITL ([0-9.]+) ms", str(row["notes"]))
    return float(found.group(1)) / 1e3 if found else float("nan")


def _setup(row: pd.Series) -> str:
    if "DeepSeek" in row["model"]:
        return "deepseek"
    return "nim" if row["tp"] == 2 else "pr"


@cache
def fit_rows() -> pd.DataFrame:
    """The admitted rows as decode steps: measured seconds, R, C, GPU work, prefill share."""
    raw = raw_rows()
    out = []
    for i, (preset, fold, setup_name) in ROWS.items():
        row = raw.iloc[i]
        setup = _setup(row)
        model, gpu, tp, dtype = SETUPS[setup]
        if setup == "pr":
            measured, metric = 1.0 / float(row["output_tok_s"]), "TPOT = 1 / output tok/s"
            seqs, context, prefill_s = 1.0, float(MTBENCH_CONTEXT), 0.0
        else:
            mean = _mean_itl_s(row)
            seqs = float(row["output_tok_s"]) * mean
            context = float(row["input_len"]) + float(row["output_len"]) / 2
            if setup == "nim":
                measured, metric = mean, "mean TPOT"
                one = _gpu_work(
                    model, gpu, tp, dtype, row["input_len"], 1.0, row["input_len"], True
                )
                prefill_s = max(seqs - 1.0, 0.0) / float(row["output_len"]) * one
            else:
                measured, metric = float(row["median_itl_ms"]) / 1e3, "median ITL"
                prefill_s = 0.0
        arch = zoo.load_arch(model)
        out.append(
            {
                "row": i,
                "preset": preset,
                "fold": fold,
                "setup": setup_name,
                "metric": metric,
                "input_len": row["input_len"],
                "output_len": row["output_len"],
                "seqs": seqs,
                "context": context,
                "measured_s": measured,
                "gpu_s": _gpu_work(model, gpu, tp, dtype, seqs, seqs, context, False),
                "prefill_s": prefill_s,
                "layers": arch.layers,
                "moe_layers": arch.moe_layers,
            }
        )
    return pd.DataFrame(out)


def _gpu_work(model, gpu, tp, dtype, tokens, seqs, context, prefill) -> float:
    spec = GPUS[gpu]
    cal = gpu_fit.calibration(spec)
    parts = step_parts(
        zoo.load_arch(model),
        Parallel(tp=int(tp), dtype=dtype),
        spec,
        cal.kernels,
        cal.allreduce,
        np.array([float(tokens)]),
        np.array([float(seqs)]),
        np.array([float(context)]),
        np.array([bool(prefill)]),
    )
    return float(sum(v[0] for v in parts.values()))


def _nnls(rows: pd.DataFrame, columns: list[str], fixed_s: np.ndarray) -> np.ndarray:
    """Non-negative terms on `columns` minimising relative error of measured - GPU - fixed."""
    meas = rows["measured_s"].to_numpy()
    gap = meas - rows["gpu_s"].to_numpy() - rows["prefill_s"].to_numpy() - fixed_s
    design = np.column_stack([_column(rows, c) for c in columns]) / meas[:, None]
    terms, _ = nnls(design, gap / meas)
    return terms


def _column(rows: pd.DataFrame, name: str) -> np.ndarray:
    if name == "step":
        return np.ones(len(rows))
    return rows[name].to_numpy(np.float64)


def _terms(step: float = 0.0, moe: float = 0.0, seq: float = 0.0) -> StepOverhead:
    return StepOverhead(0.0, float(seq), per_step_s=float(step), per_moe_layer_s=float(moe))


def shared_terms(rows: pd.DataFrame) -> StepOverhead:
    """One pooled fit over every engine's rows: for presets a fold leaves without data."""
    step, moe, seq = _nnls(rows, ["step", "moe_layers", "seqs"], 0.0)
    return _terms(step, moe, seq)


def dense_step(rows: pd.DataFrame) -> float:
    """The dense per-step cost shared across engines: pooled [1, R] fit of the dense rows."""
    dense = rows[rows["moe_layers"] == 0]
    if dense.empty:
        return 0.0
    return float(_nnls(dense, ["step", "seqs"], 0.0)[0])


def fit_presets(rows: pd.DataFrame) -> dict[str, StepOverhead]:
    """Each engine's terms on `rows` (the rules' priors where its rows cannot pin a term)."""
    out: dict[str, StepOverhead] = {}
    shared = shared_terms(rows)
    own = {name: rows[rows["preset"] == name] for name in FITTED}
    if own["sglang"].empty:
        out["sglang"] = shared
    elif (own["sglang"]["moe_layers"] == 0).any() and (own["sglang"]["moe_layers"] > 0).any():
        out["sglang"] = _terms(*_nnls(own["sglang"], ["step", "moe_layers", "seqs"], 0.0))
    else:  # one kind of model left: per_step from the shared dense prior
        step = dense_step(rows)
        moe, seq = _nnls(own["sglang"], ["moe_layers", "seqs"], np.full(len(own["sglang"]), step))
        out["sglang"] = _terms(step, moe, seq)
    if own["vllm"].empty:
        out["vllm"] = shared
    else:
        step = dense_step(rows)
        moe, seq = _nnls(own["vllm"], ["moe_layers", "seqs"], np.full(len(own["vllm"]), step))
        out["vllm"] = _terms(step, moe, seq)
    if own["trtllm"].empty:
        out["trtllm"] = shared
    else:
        step, seq = _nnls(own["trtllm"], ["step", "seqs"], 0.0)
        out["trtllm"] = _terms(step, out["sglang"].per_moe_layer_s, seq)
    return out


def predict(rows: pd.DataFrame, terms: StepOverhead) -> np.ndarray:
    fixed = terms.per_step_s + terms.per_moe_layer_s * rows["moe_layers"].to_numpy()
    return (
        rows["gpu_s"].to_numpy()
        + rows["prefill_s"].to_numpy()
        + fixed
        + (terms.per_seq_s + terms.per_token_s) * rows["seqs"].to_numpy()
    )


@cache
def presets() -> dict[str, StepOverhead]:
    """The shipped terms: fitted on every admitted row."""
    return fit_presets(fit_rows())


@cache
def loso() -> dict:
    """Leave-one-source-out: each fold's rows predicted by presets refitted without them."""
    rows = fit_rows()
    per_row = []
    folds = {}
    for fold in FOLDS:
        test = (rows["fold"] == fold).to_numpy()
        held = rows[test]
        if held.empty:
            folds[fold] = {"n": 0, "note": "no plain-decoding row dsim can price"}
            continue
        train = rows[~test]
        refit = fit_presets(train)
        empties = sorted(set(held["preset"]) - set(train["preset"]))
        pred = np.empty(len(held))
        for name, idx in held.groupby("preset").groups.items():
            pos = held.index.get_indexer(idx)
            pred[pos] = predict(held.loc[idx], refit[name])
        err = pred / held["measured_s"].to_numpy() - 1.0
        folds[fold] = gpu_fit.error_summary(err) | {
            "predicted_from": "shared terms (fold empties " + ", ".join(empties) + ")"
            if empties
            else "the engine's own refit",
            "terms": {name: asdict(t) for name, t in refit.items()},
        }
        per_row.append(held.assign(predicted_s=pred, error=err))
    table = pd.concat(per_row)
    gpu_err = (rows["gpu_s"] + rows["prefill_s"]) / rows["measured_s"] - 1.0
    setups = {
        setup: gpu_fit.error_summary(part["error"].to_numpy())
        | {"gpu_only": gpu_fit.error_summary(gpu_err[part.index].to_numpy())}
        for setup, part in table.groupby("setup")
    }
    cols = ["row", "setup", "fold", "metric", "seqs", "context", "measured_s", "gpu_s"]
    cols += ["prefill_s", "predicted_s", "error"]
    return {
        "folds": folds,
        "setups": setups,
        "all": gpu_fit.error_summary(table["error"].to_numpy()),
        "rows": table[cols].round(6).to_dict("records"),
    }


def record() -> dict:
    """What a sidecar records about the engine fit: data, rules, terms, held-out errors."""
    return {
        "data": "dsim/hardware/data/engines/published_benchmarks.csv (README: sources)",
        "rules": "docs/engine-fit-rules.md",
        "rows": {str(i): list(v) for i, v in ROWS.items()},
        "terms_s": {name: asdict(t) for name, t in presets().items()},
        "leave_one_source_out": {k: v for k, v in loso().items() if k != "rows"},
    }
