"""Calibrated GPU estimate of a drafter's pass, written as a drafter profile (`--draft-cost FILE`).

`dsim profile --roofline GPU --model M --draft-model D [--engine E]` prices one pass of drafter D
(`draft_pass`: its shapes and the rule a pass's price follows) beside target M at the verify rows
of the target's estimate (B = R * t tokens over R sequences, t = 1..8, each with KV context C),
with the same operator efficiencies (`gpu_fit`) and engine preset (`engines`) as the target's
estimate, so the two files price a round consistently. A row prices one pass of `batch_tokens`
tokens over `num_seqs` sequences, as `DraftCost` reads it: an `ar` drafter (eagle, eagle3,
DeepSeek's chained MTP) makes gamma passes a round, the first over R x (1 + gamma) tokens and the
others over R, the `block` drafter (dspark) one pass of R x gamma tokens. The engine's per-step,
per-sequence and per-token terms are charged once per round by the target's verify step (the
drafter runs inside that engine step); the per-layer term and the MoE layers' grouped-GEMM
scale, the cost of running layers, are charged for the drafter's own layers on every pass, and
every pass costs at least the engine's host time per proposer step.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.hardware import engine_fit, gpu_fit
from dsim.hardware.attention import record as attention_record
from dsim.hardware.draft_pass import (
    draft_arch,
    drafter_terms,
    get_draft_model,
    pass_gpu,
    pass_parts,
    pass_seconds,
)
from dsim.hardware.engines import DEFAULT_ENGINE
from dsim.hardware.latency import write_profile
from dsim.hardware.pricing import Pricing
from dsim.hardware.roofline import COLUMNS, estimate_inputs, grid, grid_contexts

BREAKDOWN = ((1, 1, 2048), (32, 1, 2048), (32, 7, 2048), (128, 7, 2048))  # (R, t, C)


def _breakdown(draft, price: Pricing, terms, spec_round, target_terms) -> dict:
    """Per point: the pass's parts (ms), its total, the target's verify step over the same
    tokens and its ratio (what `--draft-cost ratio:X` would have to be to agree)."""
    out = {}
    for r, t, c in BREAKDOWN:
        n = r * t
        parts = pass_parts(draft, price, n, r, c, terms.moe_gemm_scale)
        work = float(pass_gpu(draft, price, terms, n, r, c))
        total = float(spec_round.pass_seconds(work))
        step = float(price.step(target_terms, n, r, c, False))
        out[f"pass B={n} R={r} C={c}"] = {
            **{k: round(float(v) * 1e3, 4) for k, v in parts.items()},
            "engine_terms": round(work * 1e3 - sum(float(v) for v in parts.values()) * 1e3, 4),
            "host_per_proposer_step": round(spec_round.host_pass_s * 1e3, 4),
            "total": round(total * 1e3, 4),
            "target_verify_step": round(step * 1e3, 4),
            "ratio_to_target": round(total / step, 4),
        }
    return out


def _head_share(draft, price: Pricing, terms, spec_round, target_terms) -> dict:
    """The sequential head's share of a round at batch 128, gamma 7 (C 2048), beside the DSpark
    paper's "0.2-1.3% of round latency at batch 128" (a check, not a fit)."""
    r, gamma, c = 128, 7, 2048
    head = pass_parts(draft, price, r * gamma, r, c)["sequential_head"]
    drafter = pass_seconds(draft, price, terms, spec_round, r * gamma, r, c)
    verify = price.step(target_terms, r * (gamma + 1), r, c, False)
    return {
        "share_of_round": round(float(head / (drafter + verify)), 4),
        "round": "R=128, gamma 7, C=2048: the drafter's pass + the target's verify step of "
        "R x (gamma + 1) tokens",
        "published": "0.2-1.3% of round latency at batch 128 (DSpark paper)",
    }


def drafter_profile(
    gpu: str,
    model: str,
    draft_model: str,
    contexts: tuple[int, ...] | list[int] | None = None,
    tp: int = 1,
    ep: int = 1,
    dtype: str = "bf16",
    overhead_scale: float = 1.0,
    engine: str = DEFAULT_ENGINE,
    kv_dtype: str = "auto",
    capture_sizes: tuple[int, ...] | None = None,
    graph_mode: str | None = None,
) -> tuple[pd.DataFrame, dict]:
    """The drafter pass profile (standard CSV columns, verify rows) and its sidecar."""
    draft = get_draft_model(draft_model)
    preset, price = estimate_inputs(
        gpu, model, tp, ep, dtype, overhead_scale, engine, kv_dtype, capture_sizes, graph_mode
    )
    contexts = grid_contexts(contexts, model, price, preset)
    terms, spec_round = (
        drafter_terms(preset.terms, overhead_scale),
        preset.spec_round.scaled(overhead_scale),
    )
    df = grid(contexts).query("phase == 'verify'").reset_index(drop=True)
    args = (df[c].to_numpy(np.float64) for c in ("batch_tokens", "num_seqs", "context_len"))
    df["latency_ms"] = pass_seconds(draft, price, terms, spec_round, *args) * 1e3
    device = f"{gpu.lower()}x{tp} (estimate)" if tp > 1 else f"{gpu.lower()} (estimate)"
    label = f"{model} {draft.name} drafter"
    df = df.assign(device=device, model=label, dtype=price.par.dtype)[list(COLUMNS)]
    target_terms = preset.terms.scaled(overhead_scale)
    checks = (draft, price, terms, spec_round, target_terms)
    meta = {
        "estimate": True,
        "method": "calibrated GPU step-time model of one drafter pass (dsim/hardware/"
        "draft_roofline.py): the drafter's layers and LM head as the target's estimate prices "
        "them, plus its input projection, norms and sequential head",
        "drafter": draft.description,
        "draft_model": draft.name,
        "drafter_kind": draft.kind,
        "use": f"dsim run --draft-cost FILE --drafter-kind {draft.kind}: a row prices one pass "
        "of batch_tokens tokens over num_seqs sequences (ar: gamma passes a round, the first "
        "over R x (1 + gamma) tokens, the others over R; block: one pass of R x gamma tokens)",
        "gpu": gpu.lower(),
        "model": model,
        "drafter_architecture": draft_arch(draft, price.arch).describe(),
        "parallel": {"tp": tp, "ep": ep, "dtype": price.par.dtype, "gpus": tp},
        "overhead_scale": overhead_scale,
        "engine": preset.record(overhead_scale),
        "engine_terms_charged": "a pass costs max(its GPU work, the engine's host time per "
        "proposer step: spec_round.host_pass_s); its GPU work pays per_layer_s x drafter "
        "layers and its MoE layers' parts at moe_gemm_scale; per_step_s, per_seq_s "
        "and per_token_s are the engine step's (charged once per round by the target's verify "
        "step)",
        "breakdown_ms": _breakdown(*checks),
        "calibration": gpu_fit.record(),
        "engine_fit": engine_fit.record(),
        "grid": {"verify": "num_seqs R in 1..512 x 1..8 tokens each", "contexts": list(contexts)},
        "attention": {
            "decode_kernel": attention_record(
                price.with_arch(draft_arch(draft, price.arch)).attention
            ),
            "drafter": "each drafter layer reads its own KV over C, as the target's layers do",
        },
        "fusion": price.fusion.record(),
    }
    if draft.head_rank:
        meta["sequential_head_check"] = _head_share(*checks)
    return df, meta


def write_drafter_roofline(
    gpu: str, model: str, draft_model: str, out: str | Path, command: str = "", **options
) -> pd.DataFrame:
    """Compute the drafter estimate and write it (CSV + sidecar labelled as an estimate)."""
    df, meta = drafter_profile(gpu, model, draft_model, **options)
    meta["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta["command"] = command
    write_profile(df, out, meta)
    return df
