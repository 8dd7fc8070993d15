"""Shapes the GPU estimate needs: per-GPU weights, flops and bytes of one layer under TP/EP.

Dense, mixture-of-experts (MoE) and multi-head latent attention (MLA) decoders are described
by one `Arch`; `Parallel` says how a replica is split over GPUs. Everything here is exact
arithmetic on the config (no fitted numbers), so it is unit-tested with closed forms.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dsim.errors import InputError
from dsim.hardware.dtypes import BYTES, ESTIMATE_KV, ESTIMATE_WEIGHTS

# activations stay in bf16, also with 8-bit weights (the KV cache: --kv-dtype)
ACT_BYTES = BYTES["bf16"]
DRAFT_VOCAB = 32_000  # EAGLE-3's released draft vocabulary (and dsim's drafter family's cap)


@dataclass(frozen=True)
class Arch:
    """A decoder's shape. MoE fields are 0 for dense models, MLA fields 0 for MHA/GQA."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width (the first `dense_layers` of an MoE model)
    vocab: int
    gated: bool = True  # SwiGLU (gate and up) vs a plain 2-matrix MLP (BLOOM)
    tied: bool = False
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek's first_k_dense_replace)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    window: int = 0  # sliding-window span in tokens (0: every layer attends to all context)
    window_layers: int = 0  # layers attending within `window` (gpt-oss: every other layer)

    def __post_init__(self) -> None:
        """A shape whose layer counts overlap (more windowed or dense layers than layers) would
        price negative attention or KV: refuse it where it is built."""
        if not (0 <= self.window_layers <= self.layers and 0 <= self.dense_layers <= self.layers):
            raise ValueError(
                f"{self.name}: {self.layers} layers cannot hold {self.window_layers} windowed "
                f"and {self.dense_layers} dense ones"
            )

    @classmethod
    def kv_cache(cls, name: str, layers: int, kv_heads: int, head_dim: int) -> Arch:
        """A dense decoder known by its KV cache's shape alone (a profile sidecar's
        model_config): the fields `kv_bytes_per_token` reads, the others 0."""
        return cls(name, layers, 0, kv_heads, kv_heads, head_dim, 0, 0)

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def kv_layers(self) -> int:
        """Layers whose KV cache grows with the context: a sliding-window layer keeps at most
        `window` tokens a sequence (engines free the blocks that slide out)."""
        return self.layers - self.window_layers

    def mlp_params(self, width: int) -> int:
        return (3 if self.gated else 2) * self.hidden * width

    def attn_params(self) -> int:
        h, heads = self.hidden, self.heads
        if self.mla:
            qk = self.qk_nope_dim + self.qk_rope_dim
            q = (
                h * self.q_lora_rank + self.q_lora_rank * heads * qk
                if self.q_lora_rank
                else h * heads * qk
            )
            kv = h * (self.kv_lora_rank + self.qk_rope_dim)
            kv += self.kv_lora_rank * heads * (self.qk_nope_dim + self.v_head_dim)
            return q + kv + heads * self.v_head_dim * h
        d = self.head_dim
        return h * (heads + 2 * self.kv_heads) * d + heads * d * h

    def param_counts(self) -> tuple[int, int]:
        """(total, active per token) parameters, embeddings and LM head included."""
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        dense = self.dense_layers if self.moe else self.layers
        base = self.layers * self.attn_params() + dense * self.mlp_params(self.intermediate) + embed
        if not self.moe:
            return base, base
        expert = self.mlp_params(self.expert_intermediate)
        per_layer = self.hidden * self.experts + self.shared_experts * expert  # router + shared
        total = base + self.moe_layers * (per_layer + self.experts * expert)
        active = base + self.moe_layers * (per_layer + self.top_k * expert)
        return total, active

    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements one token occupies in one layer (MLA: the compressed latent)."""
        if self.mla:
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.kv_heads * self.head_dim

    def attn_dims(self) -> tuple[int, int]:
        """Per-head widths of the score and value products (MLA in absorbed form)."""
        if self.mla:
            return self.kv_lora_rank + self.qk_rope_dim, self.kv_lora_rank
        return self.head_dim, self.head_dim

    def describe(self) -> dict[str, Any]:
        total, active = self.param_counts()
        return {**asdict(self), "params_total": total, "params_active": active}


@dataclass(frozen=True)
class Parallel:
    """One replica over `tp` GPUs (tensor parallel); MoE experts split over `ep` of them."""

    tp: int = 1
    ep: int = 1
    dtype: str = "bf16"
    kv_dtype: str = "bf16"

    @property
    def weight_bytes(self) -> float:
        return BYTES[self.dtype]

    @property
    def kv_bytes(self) -> float:
        return BYTES[self.kv_dtype]


def check_parallel(arch: Arch, par: Parallel) -> None:
    """Reject splits vLLM cannot run, with one line naming the problem."""
    for vocabulary, name in ((ESTIMATE_WEIGHTS, par.dtype), (ESTIMATE_KV, par.kv_dtype)):
        if name not in vocabulary.names:  # a Parallel holds parsed names
            raise vocabulary.refuse(name)
    if par.tp < 1:
        raise InputError(None, None, f"--tp must be a positive integer, got {par.tp}")
    if par.ep < 1:
        raise InputError(None, None, f"--ep must be a positive integer, got {par.ep}")
    if arch.heads % par.tp:
        raise InputError(
            None, None, f"--tp {par.tp} does not divide {arch.name}'s {arch.heads} attention heads"
        )
    if not arch.mla and arch.kv_heads % par.tp and par.tp % arch.kv_heads:
        raise InputError(
            None,
            None,
            f"--tp {par.tp} neither divides nor is a multiple of {arch.kv_heads} KV heads",
        )
    if par.ep > 1 and not arch.moe:
        raise InputError(None, None, f"--ep {par.ep} needs an MoE model; {arch.name} is dense")
    if par.ep > 1 and par.ep != par.tp:
        raise InputError(
            None, None, f"--ep {par.ep} must equal --tp {par.tp} (experts split over the replica)"
        )
    if arch.moe and arch.experts % par.ep:
        raise InputError(None, None, f"--ep {par.ep} does not divide {arch.experts} experts")


def kv_heads_per_gpu(arch: Arch, tp: int) -> int:
    """KV heads each GPU holds: sharded while tp <= KV heads, then replicated (as vLLM does)."""
    return max(arch.kv_heads // tp, 1)


def kv_bytes_per_token_layer(arch: Arch, tp: int, elem_bytes: float = ACT_BYTES) -> float:
    """KV bytes one context token costs one GPU in one layer (MLA latent is replicated);
    `elem_bytes` per cached element (2 for bf16, 1 for an fp8 KV cache)."""
    if arch.mla:
        return arch.kv_elems_per_token_layer() * elem_bytes
    return 2 * kv_heads_per_gpu(arch, tp) * arch.head_dim * elem_bytes


def kv_bytes_per_token(arch: Arch, tp: int = 1, elem_bytes: float = ACT_BYTES) -> float:
    """KV bytes one context token costs one GPU over the layers whose cache grows with the
    context: what the KV budget divides and what a prefilled prompt sends per token."""
    return arch.kv_layers * kv_bytes_per_token_layer(arch, tp, elem_bytes)


# Routing locality (docs/engine-v2-rules.md, addendum 6): the fraction of a token's top-k
# experts the previous position of its sequence also chose. GLM-4.7-Flash (64 routed, top-4),
# measured from the router over 4,370 layer-position pairs: 25.7% against a chance of 6.25%
# (ml-explore/mlx-lm PR #1485, comment of 2026-07-26). Range: chance (k/E: independent tokens)
# to 0.38 (a second-hand report of a 128-expert top-8 model). A transfer to every MoE model.
ROUTING_OVERLAP = 0.257
ROUTING_OVERLAP_RANGE = ("k/E (chance)", 0.38)


def expected_experts(
    experts: int,
    top_k: int,
    tokens: np.ndarray,
    seqs: np.ndarray,
    overlap: float | None = None,
    independent: np.ndarray | float = 0.0,
) -> np.ndarray:
    """Expected distinct experts a step of `tokens` tokens from `seqs` sequences touches, plus
    `independent` rows routed on their own (a graph's padding rows, whose inputs are whatever
    the buffer held). Each sequence's n = tokens/seqs consecutive tokens: each token shares
    `overlap` of its top-k with the one before and draws the rest uniformly from the others, so
    one sequence touches d(n) = E - (E-k)(1 - (1-overlap) k/(E-k))^(n-1); sequences and
    independent rows are independent, so the step misses an expert with probability
    (1 - d/E)^R (1 - k/E)^I. At overlap = k/E this is uniform routing, E(1-(1-k/E)^(B+I)).
    `overlap` None: the prior `ROUTING_OVERLAP`, read when called."""
    overlap = ROUTING_OVERLAP if overlap is None else overlap
    n = np.asarray(tokens, np.float64)
    r = np.maximum(np.asarray(seqs, np.float64), 1e-12)
    if top_k >= experts:
        return np.full(np.broadcast(n, r).shape, float(experts))
    fresh = (1.0 - overlap) * top_k / (experts - top_k)
    per_seq = np.maximum(n / r, 1.0)
    one = experts - (experts - top_k) * (1.0 - fresh) ** (per_seq - 1.0)
    missed = (1.0 - one / experts) ** r * (1.0 - top_k / experts) ** np.asarray(independent)
    return experts * (1.0 - missed)


def step_experts(arch: Arch, rows: np.ndarray, tokens: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    """Distinct experts an MoE layer reads in a step of `rows` rows, `tokens` of them the
    requests' own (consecutive per sequence, `seqs` sequences) and the rest a CUDA graph's
    padding rows, each routed on its own (their inputs are whatever the buffer held)."""
    n = np.asarray(tokens, np.float64)
    independent = np.asarray(rows, np.float64) - n
    return expected_experts(arch.experts, arch.top_k, n, seqs, independent=independent)


def layer_linears(arch: Arch, par: Parallel, dense_mlp: bool) -> list[tuple[str, int, int, int]]:
    """Linear operators of one layer on one GPU: (name, weight params, in width, out width).

    Routed experts are not listed (their weights read depend on the batch: `expert_weights`).
    """
    h, tp = arch.hidden, par.tp
    heads = arch.heads // tp
    ops: list[tuple[str, int, int, int]] = []
    if arch.mla:
        qk = arch.qk_nope_dim + arch.qk_rope_dim
        if arch.q_lora_rank:
            ops.append(("q_a", h * arch.q_lora_rank, h, arch.q_lora_rank))  # replicated
            ops.append(("q_b", arch.q_lora_rank * heads * qk, arch.q_lora_rank, heads * qk))
        else:
            ops.append(("q", h * heads * qk, h, heads * qk))
        kv_a = arch.kv_lora_rank + arch.qk_rope_dim
        ops.append(("kv_a", h * kv_a, h, kv_a))  # replicated
        kv_b = heads * (arch.qk_nope_dim + arch.v_head_dim)
        ops.append(("kv_b", arch.kv_lora_rank * kv_b, arch.kv_lora_rank, kv_b))
        ops.append(("o", heads * arch.v_head_dim * h, heads * arch.v_head_dim, h))
    else:
        d = arch.head_dim
        qkv = (heads + 2 * kv_heads_per_gpu(arch, tp)) * d
        ops.append(("qkv", h * qkv, h, qkv))
        ops.append(("o", heads * d * h, heads * d, h))
    up = 2 if arch.gated else 1
    if dense_mlp:
        width = arch.intermediate // tp
        ops += [("mlp_up", h * up * width, h, up * width), ("mlp_down", width * h, width, h)]
        return ops
    ops.append(("router", h * arch.experts, h, arch.experts))  # replicated
    if arch.shared_experts:
        width = arch.shared_experts * arch.expert_intermediate // tp
        ops += [("shared_up", h * up * width, h, up * width), ("shared_down", width * h, width, h)]
    return ops


def expert_weights(arch: Arch, par: Parallel, touched: np.ndarray) -> np.ndarray:
    """Weight params one MoE layer's routed experts read on one GPU when a step touches
    `touched` distinct experts (`expected_experts`).

    Without EP each expert is TP-sharded over the replica; with EP each GPU holds E/ep whole
    experts and, every expert being as likely, reads its share of the experts the batch touches
    (mean load: imbalance between GPUs is not modelled).
    """
    per_expert = arch.mlp_params(arch.expert_intermediate)
    split = par.ep if par.ep > 1 else par.tp
    return np.asarray(touched, np.float64) * per_expert / split
