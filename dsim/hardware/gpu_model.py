"""Step time of a transformer on GPUs from its shapes and fitted efficiencies (docs/design.md,
step-time model).

Each linear operator costs `kernel + (t_c^p + t_m^p)^(1/p)`, a smooth knee between its compute
time t_c = flops / (flop_frac * peak) and memory time t_m = bytes / (bw_frac * bandwidth);
norms, rotary embedding, activation and residual adds cost `elem_kernel + bytes / (elem_bw_frac
* bandwidth)`; attention is the same soft roofline over the KV bytes read and its flops
(MODELLED: no measured GPU attention data is available here); tensor parallelism adds two
measured all-reduces per layer; the LM head runs on the tokens that need logits; a per-step
overhead (an engine preset's terms per step, layer, MoE layer, sequence and sampled token) covers
the serving engine's own work.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np

from dsim.errors import InputError
from dsim.hardware.arch import (
    ACT_BYTES,
    Arch,
    Parallel,
    expert_weights,
    kv_bytes_per_token_layer,
    kv_heads_per_gpu,
    layer_linears,
)


@dataclass(frozen=True)
class Gpu:
    """Datasheet figures (dense tensor-core peaks, HBM bandwidth) and which fit it uses."""

    flops: float
    flops_fp8: float
    bandwidth: float
    memory_bytes: float
    calibration: str  # the GPU whose measured operators and all-reduces it borrows


GPUS: dict[str, Gpu] = {
    "a100": Gpu(312e12, 312e12, 2.039e12, 80e9, "a100"),  # fp8: weight-only, bf16 math
    "h100": Gpu(989e12, 1979e12, 3.35e12, 80e9, "h100"),
    # H200 = H100's chip (same SMs, clocks, NVLink) with 141 GB of 4.8 TB/s HBM3e: it borrows
    # H100's fitted fractions and all-reduce table; only the bandwidth and memory differ.
    "h200": Gpu(989e12, 1979e12, 4.8e12, 141e9, "h100"),
}


def get_gpu(name: str) -> Gpu:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise InputError(None, None, f"unknown GPU {name!r}; known: {', '.join(GPUS)}") from None


@dataclass(frozen=True)
class KernelFit:
    """Efficiencies fitted on measured operator times of one GPU (seconds, fractions)."""

    flop_frac: float
    bw_frac: float
    knee_p: float
    kernel_s: float
    elem_kernel_s: float
    elem_bw_frac: float


@dataclass(frozen=True)
class StepOverhead:
    """A serving engine's own time per step, beyond the GPU work (an engine preset's terms,
    `dsim/hardware/engines.py`): fixed per step, per layer, per MoE layer, per running
    sequence and per sampled token (every verify token; the last token of a prefill prompt)."""

    per_layer_s: float
    per_seq_s: float
    per_step_s: float = 0.0
    per_moe_layer_s: float = 0.0
    per_token_s: float = 0.0

    def scaled(self, factor: float) -> StepOverhead:
        """Every term times `factor` (`--overhead-scale`)."""
        return StepOverhead(*(factor * v for v in astuple(self)))

    def seconds(self, arch: Arch, seqs: np.ndarray, sampled: np.ndarray) -> np.ndarray:
        """The overhead of steps over `seqs` sequences sampling `sampled` tokens."""
        fixed = (
            self.per_step_s
            + self.per_layer_s * arch.layers
            + self.per_moe_layer_s * arch.moe_layers
        )
        r, n = np.asarray(seqs, np.float64), np.asarray(sampled, np.float64)
        return fixed + self.per_seq_s * r + self.per_token_s * n


@dataclass(frozen=True)
class SpecRound:
    """An engine's speculative machinery per round, beyond the target's verify pass and the
    drafter's passes (rejection sampling, proposer state, variable-length metadata, host syncs
    between drafter passes): fixed per round plus per drafter pass (an engine preset's terms,
    `dsim/hardware/round_fit.py`)."""

    per_round_s: float = 0.0
    per_pass_s: float = 0.0

    def scaled(self, factor: float) -> SpecRound:
        """Both terms times `factor` (`--overhead-scale`)."""
        return SpecRound(*(factor * v for v in astuple(self)))

    def seconds(self, passes: int) -> float:
        """The cost of one round whose drafter makes `passes` passes."""
        return self.per_round_s + self.per_pass_s * passes


class AllReduce:
    """All-reduce time `latency + size / bandwidth` per GPU count, fitted on measured NCCL
    times (a straight line, so step costs stay monotone in the batch despite table noise)."""

    def __init__(self, fits: dict[int, tuple[float, float]], gpu: str) -> None:
        self.fits = fits  # workers -> (latency s, bus bandwidth bytes/s)
        self.gpu = gpu

    def time(self, size_bytes: np.ndarray, workers: int) -> np.ndarray:
        size = np.asarray(size_bytes, np.float64)
        if workers == 1:
            return np.zeros_like(size)
        if workers not in self.fits:
            have = ", ".join(map(str, sorted(self.fits)))
            raise InputError(
                None, None, f"no measured all-reduce for {workers} GPUs on {self.gpu} (have {have})"
            )
        latency, bandwidth = self.fits[workers]
        return latency + size / bandwidth


def soft_max(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """(a^p + b^p)^(1/p): max(a, b) for large p, a smooth knee for small p."""
    hi = np.maximum(np.maximum(a, b), 1e-30)
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


def linear_time(
    fit: KernelFit, gpu: Gpu, flops: np.ndarray, nbytes: np.ndarray, peak: float
) -> np.ndarray:
    t_c = flops / (fit.flop_frac * peak)
    t_m = nbytes / (fit.bw_frac * gpu.bandwidth)
    return fit.kernel_s + soft_max(t_c, t_m, fit.knee_p)


def elementwise_time(fit: KernelFit, gpu: Gpu, nbytes: np.ndarray) -> np.ndarray:
    return fit.elem_kernel_s + nbytes / (fit.elem_bw_frac * gpu.bandwidth)


def elementwise_bytes(arch: Arch, par: Parallel, tokens: np.ndarray, dense_mlp: bool) -> dict:
    """Bytes each elementwise operator of one layer moves on one GPU (read + write)."""
    n, h = np.asarray(tokens, np.float64), arch.hidden
    heads = arch.heads // par.tp
    if arch.mla:
        rope = 2 * n * (heads + 1) * arch.qk_rope_dim
    else:
        rope = 2 * n * (heads + kv_heads_per_gpu(arch, par.tp)) * arch.head_dim
    if dense_mlp:
        act_width = n * arch.intermediate / par.tp
    else:
        split = par.ep if par.ep > 1 else par.tp
        shared = arch.shared_experts * arch.expert_intermediate / par.tp
        act_width = n * (arch.top_k * arch.expert_intermediate / split + shared)
    act = (3 if arch.gated else 2) * act_width
    return {
        "norm": 2 * n * h * ACT_BYTES,
        "rope": rope * ACT_BYTES,
        "act": act * ACT_BYTES,
        "add": 3 * n * h * ACT_BYTES,
    }


ELEMENTWISE_PER_LAYER = {"norm": 2, "rope": 1, "act": 1, "add": 2}


def layer_time(
    arch: Arch,
    par: Parallel,
    gpu: Gpu,
    fit: KernelFit,
    tokens: np.ndarray,
    dense_mlp: bool,
) -> dict[str, np.ndarray]:
    """Seconds of one layer's linear and elementwise operators (no attention, no all-reduce)."""
    n = np.asarray(tokens, np.float64)
    peak = gpu.flops_fp8 if par.dtype == "fp8" else gpu.flops
    wb = par.weight_bytes
    linear = np.zeros_like(n)
    for _, params, d_in, d_out in layer_linears(arch, par, dense_mlp):
        nbytes = params * wb + n * (d_in + d_out) * ACT_BYTES
        linear = linear + linear_time(fit, gpu, 2.0 * n * params, nbytes, peak)
    if not dense_mlp:
        params, flops = expert_weights(arch, par, n)
        split = par.ep if par.ep > 1 else par.tp
        width = (2 if arch.gated else 1) * arch.expert_intermediate / split
        act = n * arch.top_k * (arch.hidden + width) * ACT_BYTES * 2  # up and down activations
        linear = linear + linear_time(fit, gpu, flops, params * wb + act, peak)
    elem = sum(
        count * elementwise_time(fit, gpu, elementwise_bytes(arch, par, n, dense_mlp)[name])
        for name, count in ELEMENTWISE_PER_LAYER.items()
    )
    return {"linear": linear, "elementwise": elem}


def attention_time(
    arch: Arch,
    par: Parallel,
    gpu: Gpu,
    fit: KernelFit,
    kv_tokens: np.ndarray,
    pairs: np.ndarray,
) -> np.ndarray:
    """MODELLED attention of one layer on one GPU: KV bytes read and score/value flops.

    `kv_tokens` is the context tokens whose KV the step reads (summed over sequences), `pairs`
    the (query, key) pairs it scores. Same efficiencies as the linear operators (an assumption:
    no measured attention kernel times exist in the calibration data); bf16 math.
    """
    d_qk, d_v = arch.attn_dims()
    flops = 2.0 * pairs * (arch.heads // par.tp) * (d_qk + d_v)
    nbytes = kv_tokens * kv_bytes_per_token_layer(arch, par.tp, par.kv_bytes)
    return linear_time(fit, gpu, flops, nbytes, gpu.flops)


def step_parts(
    arch: Arch,
    par: Parallel,
    gpu: Gpu,
    fit: KernelFit,
    allreduce: AllReduce,
    tokens: np.ndarray,
    seqs: np.ndarray,
    context: np.ndarray,
    prefill: np.ndarray,
) -> dict[str, np.ndarray]:
    """Seconds by component of one step on one GPU of the replica, without the step overhead.

    Verify/decode rows: `tokens` B over `seqs` R, each reading `context` C of KV; every token
    needs logits. Prefill rows: `tokens` P over `seqs` prompts, chunks of n = P/R ending at
    context C (causal: each chunk scores n*(C - (n-1)/2) pairs); only the last token of each
    prompt needs logits (vLLM).
    """
    n = np.asarray(tokens, np.float64)
    r = np.asarray(seqs, np.float64)
    c = np.asarray(context, np.float64)
    pre = np.asarray(prefill, bool)
    chunk = n / r
    pairs = np.where(pre, r * chunk * np.maximum(c - (chunk - 1) / 2, 1.0), n * c)
    logits = np.where(pre, r, n)
    parts = {"linear": 0.0, "elementwise": 0.0}
    dense_layers = arch.dense_layers if arch.moe else arch.layers
    for count, dense in ((dense_layers, True), (arch.moe_layers, False)):
        if count:
            for key, value in layer_time(arch, par, gpu, fit, n, dense).items():
                parts[key] = parts[key] + count * value
    parts["attention"] = arch.layers * attention_time(arch, par, gpu, fit, r * c, pairs)
    parts["allreduce"] = 2 * arch.layers * allreduce.time(n * arch.hidden * ACT_BYTES, par.tp)
    head = arch.vocab // par.tp * arch.hidden
    head_bytes = head * ACT_BYTES + logits * (arch.hidden + arch.vocab / par.tp) * ACT_BYTES
    parts["lm_head"] = linear_time(fit, gpu, 2.0 * logits * head, head_bytes, gpu.flops)
    return {k: np.broadcast_to(v, n.shape).astype(np.float64) for k, v in parts.items()}


def step_time(
    arch: Arch,
    par: Parallel,
    gpu: Gpu,
    fit: KernelFit,
    allreduce: AllReduce,
    overhead: StepOverhead,
    tokens: np.ndarray,
    seqs: np.ndarray,
    context: np.ndarray,
    prefill: np.ndarray,
) -> np.ndarray:
    """Seconds of one step: the sum of `step_parts` plus the engine's step overhead."""
    parts = step_parts(arch, par, gpu, fit, allreduce, tokens, seqs, context, prefill)
    return sum(parts.values()) + overhead.seconds(arch, seqs, sampled_tokens(tokens, seqs, prefill))


def sampled_tokens(tokens: np.ndarray, seqs: np.ndarray, prefill: np.ndarray) -> np.ndarray:
    """Tokens a step samples: every verify token, the last token of each prefill prompt."""
    return np.where(np.asarray(prefill, bool), np.asarray(seqs), np.asarray(tokens))
