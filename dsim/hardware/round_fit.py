"""Fitting the speculative round cost on the published speculative runs (profiles/README.md,
Engine presets; the rules: docs/round-fit-rules.md).

A speculative round costs the target's verify pass, the drafter's passes (both priced by the GPU
model with the engine's step terms) and the engine's speculative machinery beyond them,
`per_round + per_pass x passes` (`SpecRound`). Each row is read as a ratio against its own
source's plain run: T_round = (accepted length / speed-up) x the modelled plain step, so the
setup's absolute step error cancels. The terms are fitted by non-negative least squares on
relative error; leave one row out predicts each row's speed-up from the other two.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import cache

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dsim.hardware import engine_fit, gpu_fit, zoo
from dsim.hardware.arch import DRAFT_VOCAB, Parallel
from dsim.hardware.gpu_model import GPUS, SpecRound, StepOverhead, step_time


@dataclass(frozen=True)
class SpecRow:
    """One speculative row as the rules read it (docs/round-fit-rules.md, the table)."""

    row: int
    label: str
    model: str
    gpu: str
    tp: int
    dtype: str
    seqs: int
    context: float
    verify_per_seq: int  # tokens each sequence verifies in the round
    passes: int  # drafter passes per round
    pass_per_seq: int  # tokens per sequence in each drafter pass
    accept_len: float  # tokens emitted per round per request (bonus token included)
    speedup: float  # speculative tok/s over the same source's plain tok/s


def spec_rows() -> list[SpecRow]:
    """Rows 18-20 of the data, read as the rules say (lengths and speeds from the CSV)."""
    raw = engine_fit.raw_rows()
    plain_eagle = float(raw.iloc[17]["output_tok_s"])
    lmsys_plain = 51.0  # the LMSYS blog's baseline, per rank (notes of rows 19-20)
    eagle = raw.iloc[18]
    out = [
        SpecRow(
            18,
            "SGLang EAGLE-3 tree, Llama-3.3-70B, 8x H100, batch 1",
            "llama3.3-70b",
            "h100",
            8,
            "bf16",
            1,
            float(engine_fit.MTBENCH_CONTEXT),
            64,
            8,
            8,
            float(eagle["mean_accept_len"]),
            float(eagle["output_tok_s"]) / plain_eagle,
        )
    ]
    for i in (19, 20):
        row = raw.iloc[i]
        k = int(row["num_spec_tokens"])
        out.append(
            SpecRow(
                i,
                f"SGLang MTP {k} drafts, DeepSeek-V3, 2 per rank",
                "deepseek-v3",
                "h200",
                8,
                "fp8",
                2,
                float(row["input_len"]) + float(row["output_len"]) / 2,
                1 + k,
                k,
                1,
                float(row["mean_accept_len"]),
                float(row["output_tok_s"]) / lmsys_plain,
            )
        )
    return out


def drafter_arch(row: SpecRow):
    """One drafter pass's shape: EAGLE-3 one target layer with its 32k head; MTP one MoE layer
    of the target with the shared head (docs/round-fit-rules.md, Drafter passes)."""
    arch = zoo.load_arch(row.model)
    if arch.moe:
        return replace(arch, name=arch.name + "-mtp", layers=1, dense_layers=0)
    return replace(arch, name=arch.name + "-eagle3", layers=1, vocab=DRAFT_VOCAB)


def _seconds(arch, row: SpecRow, tokens: float, terms: StepOverhead) -> float:
    spec = GPUS[row.gpu]
    cal = gpu_fit.calibration(spec)
    return float(
        step_time(
            arch,
            Parallel(tp=row.tp, dtype=row.dtype),
            spec,
            cal.kernels,
            cal.allreduce,
            terms,
            np.array([float(tokens)]),
            np.array([float(row.seqs)]),
            np.array([row.context]),
            np.array([False]),
        )[0]
    )


@cache
def round_table() -> pd.DataFrame:
    """Per row: the modelled plain step, verify pass and drafter passes, and the measured round."""
    terms = engine_fit.presets()["sglang"]
    out = []
    for row in spec_rows():
        arch = zoo.load_arch(row.model)
        plain = _seconds(arch, row, row.seqs, terms)
        verify = _seconds(arch, row, row.seqs * row.verify_per_seq, terms)
        one_pass = _seconds(drafter_arch(row), row, row.seqs * row.pass_per_seq, terms)
        out.append(
            asdict(row)
            | {
                "plain_s": plain,
                "verify_s": verify,
                "draft_s": row.passes * one_pass,
                "measured_round_s": row.accept_len / row.speedup * plain,
            }
        )
    return pd.DataFrame(out)


def fit_terms(rows: pd.DataFrame) -> SpecRound:
    """Non-negative [per_round, per_pass] on relative error of the measured round."""
    meas = rows["measured_round_s"].to_numpy()
    gap = meas - rows["verify_s"].to_numpy() - rows["draft_s"].to_numpy()
    design = np.column_stack([np.ones(len(rows)), rows["passes"].to_numpy(np.float64)])
    terms, _ = nnls(design / meas[:, None], gap / meas)
    return SpecRound(float(terms[0]), float(terms[1]))


def predict_speedup(rows: pd.DataFrame, terms: SpecRound) -> np.ndarray:
    """AL x T_plain / T_round under `terms`."""
    cost = terms.per_round_s + terms.per_pass_s * rows["passes"].to_numpy(np.float64)
    total = rows["verify_s"].to_numpy() + rows["draft_s"].to_numpy() + cost
    return rows["accept_len"].to_numpy() * rows["plain_s"].to_numpy() / total


@cache
def spec_round() -> SpecRound:
    """The shipped SGLang terms: fitted on every speculative row."""
    return fit_terms(round_table())


@cache
def leave_one_out() -> dict:
    """Each row's speed-up predicted by the terms refitted on the other rows."""
    table = round_table()
    rows = []
    in_sample = predict_speedup(table, spec_round())
    for pos in range(len(table)):
        terms = fit_terms(table.drop(index=table.index[pos]))
        pred = float(predict_speedup(table.iloc[[pos]], terms)[0])
        meas = float(table["speedup"].iloc[pos])
        rows.append(
            {
                "row": int(table["row"].iloc[pos]),
                "label": str(table["label"].iloc[pos]),
                "measured_speedup": round(meas, 4),
                "predicted_speedup": round(pred, 4),
                "error": round(pred / meas - 1.0, 4),
                "in_sample_error": round(float(in_sample[pos]) / meas - 1.0, 4),
                "fold_terms_s": asdict(terms),
            }
        )
    errors = np.array([r["error"] for r in rows])
    return {"rows": rows, "summary": gpu_fit.error_summary(errors)}


def record() -> dict:
    """What a sidecar records about the round-cost fit."""
    return {
        "rules": "docs/round-fit-rules.md",
        "rows": [int(r) for r in round_table()["row"]],
        "terms_s": asdict(spec_round()),
        "leave_one_out": leave_one_out(),
    }
