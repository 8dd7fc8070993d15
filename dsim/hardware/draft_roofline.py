"""Calibrated GPU estimate of a drafter's pass, written as a drafter profile (`--draft-cost FILE`).

`dsim profile --roofline GPU --model M --draft-model D [--engine E]` prices one pass of drafter D
beside target M at the verify rows of the target's estimate (B = R * t tokens over R sequences,
t = 1..8, each with KV context C), with the same operator efficiencies (`gpu_fit`) and engine
preset (`engines`) as the target's estimate, so the two files price a round consistently:

- `eagle` (EAGLE-1): an fc fusing [embedding; feature] (2H -> H), one decoder layer at the
  target's width (the target's attention and dense MLP shapes), the target's LM head (shared).
- `eagle3` (EAGLE-3): an fc fusing three target layers (3H -> H), two input norms, one decoder
  layer whose attention reads [embedding; hidden] (2H wide), an LM head over a 32k draft
  vocabulary (EAGLE-3's released checkpoints use 32,000 draft tokens).
- `mtp` (DeepSeek's multi-token prediction module): two input norms, a projection of
  [embedding; hidden] (2H -> H), one layer of the target itself (an MoE layer for an MoE target,
  MLA for an MLA one), the target's LM head (shared).
- `dspark` (the gamma-block drafter of dsim's drafter family): a backbone of two decoder layers
  of the target's shapes over all R x gamma block positions in one pass, an LM head over a 32k
  draft vocabulary at every position, then its sequential head: gamma steps, one per position,
  each a rank-64 transition bias (rank x draft vocabulary) over R tokens plus an elementwise add.

Every drafter layer attends over the context C (its own KV cache of one layer). A row prices one
pass of `batch_tokens` tokens over `num_seqs` sequences, as `DraftCost` reads it: an `ar`
drafter (eagle, eagle3, DeepSeek's chained MTP) makes gamma passes of R tokens, the `block`
drafter (dspark) one pass of R x gamma tokens. The engine's per-step term is charged once per
round by the target's verify step (the drafter runs inside that engine step), and so are its
per-sequence and per-token terms (scheduling, input preparation, sampling: once per engine
step); the per-layer and per-MoE-layer terms, the cost of running layers, are charged for the
drafter's own layers on every pass.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.errors import InputError
from dsim.hardware import engine_fit, gpu_fit
from dsim.hardware.arch import ACT_BYTES, DRAFT_VOCAB, Arch, Parallel, layer_linears
from dsim.hardware.engines import DEFAULT_ENGINE
from dsim.hardware.gpu_model import (
    StepOverhead,
    elementwise_time,
    linear_time,
    step_parts,
    step_time,
)
from dsim.hardware.latency import write_profile
from dsim.hardware.roofline import COLUMNS, estimate_inputs, grid, grid_contexts

HEAD_RANK = 64  # the sequential (markov) head's rank, dsim's drafter default
BLOCK_LAYERS = 2  # the block drafter's backbone depth (DrafterConfig.for_target's default)


@dataclass(frozen=True)
class DraftModel:
    """A drafter's shape relative to its target, and the `--drafter-kind` that prices it."""

    name: str
    kind: str  # the --drafter-kind whose passes this profile prices
    description: str
    body: str  # "dense": decoder layers at the target's width; "target": the target's own layer
    layers: int = 1
    fused_inputs: int = 0  # hidden-sized inputs the input projection fuses (0: none)
    input_norms: int = 0
    qkv_inputs: int = 1  # hidden-sized inputs of the first layer's QKV projection
    draft_vocab: int | None = None  # None: the target's LM head (shared)
    head_rank: int = 0  # sequential head: one rank x vocab bias per position (0: none)


DRAFT_MODELS: dict[str, DraftModel] = {
    "eagle": DraftModel(
        "eagle", "ar", "EAGLE-1: fc 2H->H, one decoder layer, the target's LM head", "dense",
        fused_inputs=2,
    ),
    "eagle3": DraftModel(
        "eagle3", "ar", "EAGLE-3: fc 3H->H, one decoder layer reading [embedding; hidden], "
        f"LM head over a {DRAFT_VOCAB}-token draft vocabulary", "dense",
        fused_inputs=3, input_norms=2, qkv_inputs=2, draft_vocab=DRAFT_VOCAB,
    ),
    "mtp": DraftModel(
        "mtp", "ar", "DeepSeek MTP: projection 2H->H, one layer of the target, the shared LM "
        "head; chained (gamma > 1) it runs once per draft, each pass reading the last one's "
        "output: autoregressive (--drafter-kind ar; at gamma 1 that is mtp1)", "target",
        fused_inputs=2, input_norms=2,
    ),
    "dspark": DraftModel(
        "dspark", "block", f"block drafter: {BLOCK_LAYERS} decoder layers over the R x gamma "
        f"block in one pass, LM head over a {DRAFT_VOCAB}-token draft vocabulary, sequential "
        f"rank-{HEAD_RANK} head over the block's positions", "dense",
        layers=BLOCK_LAYERS, draft_vocab=DRAFT_VOCAB, head_rank=HEAD_RANK,
    ),
}  # fmt: skip


def get_draft_model(name: str) -> DraftModel:
    """The drafter named `name` (InputError listing the names when unknown)."""
    try:
        return DRAFT_MODELS[name.lower()]
    except KeyError:
        known = ", ".join(DRAFT_MODELS)
        raise InputError(None, None, f"--draft-model: unknown {name!r}; known: {known}") from None


def draft_arch(draft: DraftModel, arch: Arch) -> Arch:
    """The drafter's decoder layers as an `Arch` (its vocabulary is its LM head's)."""
    vocab = draft.draft_vocab or arch.vocab
    if draft.body == "target":  # one layer of the target itself: MoE if the target's are
        return replace(arch, layers=draft.layers, dense_layers=0, vocab=vocab)
    dense = dict(experts=0, top_k=0, expert_intermediate=0, shared_experts=0, dense_layers=0)
    mla = dict(q_lora_rank=0, kv_lora_rank=0, qk_nope_dim=0, qk_rope_dim=0, v_head_dim=0)
    return replace(arch, layers=draft.layers, vocab=vocab, **dense, **mla)


def _extras(draft, arch: Arch, body: Arch, par: Parallel, gpu, fit, n, r) -> dict:
    """Seconds of what the drafter adds to its layers: input projection, input norms, the
    wider QKV input, the sequential head (all TP-sharded like the layers' linears)."""
    h, wb = arch.hidden, par.weight_bytes
    peak = gpu.flops_fp8 if par.dtype == "fp8" else gpu.flops
    zero = np.zeros_like(n)
    out = {"input_proj": zero, "input_norms": zero, "qkv_extra": zero, "sequential_head": zero}
    if draft.fused_inputs:
        params = draft.fused_inputs * h * h / par.tp
        act = n * (draft.fused_inputs * h + h / par.tp) * ACT_BYTES
        out["input_proj"] = linear_time(fit, gpu, 2 * n * params, params * wb + act, peak)
    if draft.input_norms:
        out["input_norms"] = draft.input_norms * elementwise_time(fit, gpu, 2 * n * h * ACT_BYTES)
    if draft.qkv_inputs > 1:
        _, params, _, width = layer_linears(body, par, True)[0]  # the QKV projection
        params, act = (draft.qkv_inputs - 1) * params, n * (h + width) * ACT_BYTES
        out["qkv_extra"] = linear_time(fit, gpu, 2 * n * params, params * wb + act, peak)
    if draft.head_rank:
        vocab = body.vocab / par.tp
        params = draft.head_rank * vocab
        act = r * (draft.head_rank + vocab) * ACT_BYTES
        step = linear_time(fit, gpu, 2 * r * params, params * wb + act, peak)
        step = step + elementwise_time(fit, gpu, 3 * r * vocab * ACT_BYTES)
        out["sequential_head"] = (n / r) * step  # one step per block position, in sequence
    return out


def pass_parts(draft, arch, par, gpu, cal, tokens, seqs, context) -> dict[str, np.ndarray]:
    """Seconds by component of one drafter pass of `tokens` over `seqs` sequences at context
    `context` (GPU work only: `pass_seconds` adds the engine's terms)."""
    body = draft_arch(draft, arch)
    n, r = np.asarray(tokens, np.float64), np.asarray(seqs, np.float64)
    c = np.asarray(context, np.float64)
    parts = step_parts(body, par, gpu, cal.kernels, cal.allreduce, n, r, c, np.zeros(n.shape, bool))
    return {**parts, **_extras(draft, arch, body, par, gpu, cal.kernels, n, r)}


def drafter_terms(preset, scale: float) -> StepOverhead:
    """The engine terms a drafter pass pays: those of running layers (per layer, per MoE
    layer); the per-step, per-sequence and per-token terms are the engine step's own
    (scheduling, input preparation, sampling), paid once a round by the target's step."""
    t = preset.terms.scaled(scale)
    return StepOverhead(t.per_layer_s, 0.0, per_moe_layer_s=t.per_moe_layer_s)


def pass_seconds(draft, arch, par, gpu, cal, overhead, tokens, seqs, context) -> np.ndarray:
    """Seconds of one drafter pass: its GPU work plus the engine terms it pays."""
    parts = pass_parts(draft, arch, par, gpu, cal, tokens, seqs, context)
    body = draft_arch(draft, arch)
    return sum(parts.values()) + overhead.seconds(body, seqs, tokens)


BREAKDOWN = ((1, 1, 2048), (32, 1, 2048), (32, 7, 2048), (128, 7, 2048))  # (R, t, C)


def _breakdown(draft, arch, par, gpu, cal, overhead, target_terms) -> dict:
    """Per point: the pass's parts (ms), its total, the target's verify step over the same
    tokens and its ratio (what `--draft-cost ratio:X` would have to be to agree)."""
    out = {}
    for r, t, c in BREAKDOWN:
        n = r * t
        parts = pass_parts(draft, arch, par, gpu, cal, n, r, c)
        total = float(pass_seconds(draft, arch, par, gpu, cal, overhead, n, r, c))
        step = float(
            step_time(arch, par, gpu, cal.kernels, cal.allreduce, target_terms, n, r, c, False)
        )
        out[f"pass B={n} R={r} C={c}"] = {
            **{k: round(float(v) * 1e3, 4) for k, v in parts.items()},
            "engine_terms": round(float(overhead.seconds(draft_arch(draft, arch), r, n)) * 1e3, 4),
            "total": round(total * 1e3, 4),
            "target_verify_step": round(step * 1e3, 4),
            "ratio_to_target": round(total / step, 4),
        }
    return out


def _head_share(draft, arch, par, gpu, cal, overhead, target_terms) -> dict:
    """The sequential head's share of a round at batch 128, gamma 7 (C 2048), beside the DSpark
    paper's "0.2-1.3% of round latency at batch 128" (a check, not a fit)."""
    r, gamma, c = 128, 7, 2048
    head = pass_parts(draft, arch, par, gpu, cal, r * gamma, r, c)["sequential_head"]
    drafter = pass_seconds(draft, arch, par, gpu, cal, overhead, r * gamma, r, c)
    n = r * (gamma + 1)
    verify = step_time(arch, par, gpu, cal.kernels, cal.allreduce, target_terms, n, r, c, False)
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
    kv_dtype: str = "bf16",
) -> tuple[pd.DataFrame, dict]:
    """The drafter pass profile (standard CSV columns, verify rows) and its sidecar."""
    draft = get_draft_model(draft_model)
    preset, spec, arch, par = estimate_inputs(
        gpu, model, tp, ep, dtype, overhead_scale, engine, kv_dtype
    )
    contexts = grid_contexts(contexts, gpu, model, arch, par, spec)
    cal, overhead = gpu_fit.calibration(spec), drafter_terms(preset, overhead_scale)
    df = grid(contexts).query("phase == 'verify'").reset_index(drop=True)
    args = (df[c].to_numpy(np.float64) for c in ("batch_tokens", "num_seqs", "context_len"))
    df["latency_ms"] = pass_seconds(draft, arch, par, spec, cal, overhead, *args) * 1e3
    device = f"{gpu.lower()}x{tp} (estimate)" if tp > 1 else f"{gpu.lower()} (estimate)"
    label = f"{model} {draft.name} drafter"
    df = df.assign(device=device, model=label, dtype=par.dtype)[list(COLUMNS)]
    target_terms = preset.terms.scaled(overhead_scale)
    meta = {
        "estimate": True,
        "method": "calibrated GPU step-time model of one drafter pass (dsim/hardware/"
        "draft_roofline.py): the drafter's layers and LM head as the target's estimate prices "
        "them, plus its input projection, norms and sequential head",
        "drafter": draft.description,
        "draft_model": draft.name,
        "drafter_kind": draft.kind,
        "use": f"dsim run --draft-cost FILE --drafter-kind {draft.kind}: a row prices one pass "
        "of batch_tokens tokens over num_seqs sequences (ar: gamma passes of R tokens a "
        "round; block: one pass of R x gamma tokens)",
        "gpu": gpu.lower(),
        "model": model,
        "drafter_architecture": draft_arch(draft, arch).describe(),
        "parallel": {"tp": tp, "ep": ep, "dtype": par.dtype, "gpus": tp},
        "overhead_scale": overhead_scale,
        "engine": preset.record(overhead_scale),
        "engine_terms_charged": "per_layer_s x drafter layers + per_moe_layer_s x its MoE "
        "layers on every pass; per_step_s, per_seq_s and per_token_s are the engine step's "
        "(charged once per round by the target's verify step)",
        "breakdown_ms": _breakdown(draft, arch, par, spec, cal, overhead, target_terms),
        "calibration": gpu_fit.record(),
        "engine_fit": engine_fit.record(),
        "grid": {"verify": "num_seqs R in 1..512 x 1..8 tokens each", "contexts": list(contexts)},
        "attention": "MODELLED as the target's: each drafter layer reads its own KV over C",
    }
    if draft.head_rank:
        meta["sequential_head_check"] = _head_share(
            draft, arch, par, spec, cal, overhead, target_terms
        )
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
