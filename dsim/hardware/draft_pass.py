"""One drafter pass priced on its target's setup: the drafters' shapes relative to their targets
and the one rule a pass's price follows (docs/design.md, Drafter and scheduler cost). Used by the
drafter profiles (`draft_roofline`) and the round fit (`round_fit`) alike.

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

Every drafter layer attends over the context C (its own KV cache of one layer). A pass costs the
longer of its work (its operators plus the engine's per-layer terms) and the engine's host time
per proposer step (`SpecRound.pass_seconds`): a small drafter is host-bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dsim.errors import InputError
from dsim.hardware.arch import ACT_BYTES, DRAFT_VOCAB, Arch, Parallel, layer_linears
from dsim.hardware.gpu_model import SpecRound, StepOverhead, elementwise_time, linear_time
from dsim.hardware.pricing import Pricing

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
        "eagle",
        "ar",
        "EAGLE-1: fc 2H->H, one decoder layer, the target's LM head",
        "dense",
        fused_inputs=2,
    ),
    "eagle3": DraftModel(
        "eagle3",
        "ar",
        "EAGLE-3: fc 3H->H, one decoder layer reading [embedding; hidden], "
        f"LM head over a {DRAFT_VOCAB}-token draft vocabulary",
        "dense",
        fused_inputs=3,
        input_norms=2,
        qkv_inputs=2,
        draft_vocab=DRAFT_VOCAB,
    ),
    "mtp": DraftModel(
        "mtp",
        "ar",
        "DeepSeek MTP: projection 2H->H, one layer of the target, the shared LM "
        "head; chained (gamma > 1) it runs once per draft, each pass reading the last one's "
        "output: autoregressive (--drafter-kind ar; at gamma 1 that is mtp1)",
        "target",
        fused_inputs=2,
        input_norms=2,
    ),
    "dspark": DraftModel(
        "dspark",
        "block",
        f"block drafter: {BLOCK_LAYERS} decoder layers over the R x gamma "
        f"block in one pass, LM head over a {DRAFT_VOCAB}-token draft vocabulary, sequential "
        f"rank-{HEAD_RANK} head over the block's positions",
        "dense",
        layers=BLOCK_LAYERS,
        draft_vocab=DRAFT_VOCAB,
        head_rank=HEAD_RANK,
    ),
}


def get_draft_model(name: str) -> DraftModel:
    """The drafter named `name` (InputError listing the names when unknown)."""
    try:
        return DRAFT_MODELS[name.lower()]
    except KeyError:
        known = ", ".join(DRAFT_MODELS)
        raise InputError(None, None, f"--draft-model: unknown {name!r}; known: {known}") from None


def draft_arch(draft: DraftModel, arch: Arch) -> Arch:
    """The drafter's decoder layers as an `Arch` (its vocabulary is its LM head's). They attend
    to the whole context (no drafter of a sliding-window target says otherwise): the dearer
    reading, and a drafter of one layer cannot carry the target's count of windowed layers."""
    vocab = draft.draft_vocab or arch.vocab
    full = dict(window=0, window_layers=0)
    if draft.body == "target":  # one layer of the target itself: MoE if the target's are
        return replace(arch, layers=draft.layers, dense_layers=0, vocab=vocab, **full)
    dense = dict(experts=0, top_k=0, expert_intermediate=0, shared_experts=0, dense_layers=0)
    mla = dict(q_lora_rank=0, kv_lora_rank=0, qk_nope_dim=0, qk_rope_dim=0, v_head_dim=0)
    return replace(arch, layers=draft.layers, vocab=vocab, **dense, **mla, **full)


def _extras(draft, arch: Arch, body: Arch, par: Parallel, gpu, fit, n, r) -> dict:
    """Seconds of what the drafter adds to its layers: input projection, input norms, the
    wider QKV input, the sequential head (all TP-sharded like the layers' linears)."""
    h, wb = arch.hidden, par.weight_bytes
    peak = gpu.peak(par.dtype)
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


def pass_parts(
    draft, price: Pricing, tokens, seqs, context, moe_scale: float = 1.0
) -> dict[str, np.ndarray]:
    """Seconds by component of one drafter pass of `tokens` over `seqs` sequences at context
    `context` on the target's setup `price` (GPU work of the operators only; MoE layers at the
    engine's grouped-GEMM scale `moe_scale`)."""
    body = draft_arch(draft, price.arch)
    n, r = np.asarray(tokens, np.float64), np.asarray(seqs, np.float64)
    c = np.asarray(context, np.float64)
    parts = price.with_arch(body).parts(n, r, c, np.zeros(n.shape, bool), moe_scale)
    extras = _extras(draft, price.arch, body, price.par, price.gpu, price.cal.kernels, n, r)
    return {**parts, **extras}


def drafter_terms(engine_terms: StepOverhead, scale: float) -> StepOverhead:
    """The engine terms a drafter pass pays: those of running layers (per layer, and its MoE
    layers' grouped-GEMM scale); the per-step, per-sequence and per-token terms are the
    engine step's own (scheduling, input preparation, sampling), paid once a round by the
    target's step, and the host time per proposer step is the round's (`SpecRound`)."""
    t = engine_terms.scaled(scale)
    return StepOverhead(t.per_layer_s, 0.0, moe_gemm_scale=t.moe_gemm_scale)


def pass_gpu(draft, price: Pricing, terms: StepOverhead, tokens, seqs, context) -> np.ndarray:
    """Seconds of one drafter pass's work: its operators plus the layer terms it pays."""
    body = draft_arch(draft, price.arch)
    parts = pass_parts(draft, price, tokens, seqs, context, terms.moe_gemm_scale)
    return sum(parts.values()) + terms.seconds(body, seqs, tokens)


def pass_seconds(
    draft, price: Pricing, terms: StepOverhead, spec_round: SpecRound, tokens, seqs, context
) -> np.ndarray:
    """Seconds of one drafter pass: the longer of its work and the engine's host time per
    proposer step (`SpecRound.pass_seconds`, the one rule)."""
    return spec_round.pass_seconds(pass_gpu(draft, price, terms, tokens, seqs, context))
