"""One MoE layer's GPU seconds on one GPU, by its parts (docs/engine-priors.md, section f).

The router's linear operator (hidden x experts) is priced with the dense linears; what this
module prices is what the engine's fused-MoE path launches after it:

- `moe_kernels`: the token alignment to the grouped GEMM's block (`moe_align_block_size`) at
  its published latency, and the small kernels, each priced as an elementwise operator (the
  calibration's kernel floor plus its bytes): top-k over the router logits, the weighted sum of
  the top-k outputs (`moe_sum`) and, with fp8 weights, the per-token quantisation of each
  grouped GEMM's input (SiLU-and-mul is an elementwise operator of the layer, priced there);
- `moe_gemm`: the two grouped GEMMs (w13 then w2), each `latency + max(flops / (flop_frac x
  peak), bytes / (eta x scale x bandwidth))`: the weights of the experts the step touches
  (`arch.expert_weights`: consecutive tokens of one sequence share experts), the tokens
  padded per expert to the kernel's block M, at the bandwidth efficiency `eta` of the expert
  slice's width (published kernel benchmarks) times the engine version's fitted `scale`
  (`engine_fit`);
- `moe_a2a`: with expert parallelism, dispatch and combine at their bytes over NVLink (each
  GPU sends its 1/ep share of the tokens to the experts on the other GPUs), in place of the
  layer's all-reduce after the MLP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from dsim.hardware.arch import (
    ACT_BYTES,
    ROUTING_OVERLAP,
    ROUTING_OVERLAP_RANGE,
    Arch,
    Parallel,
    expert_weights,
)


class Gpu(Protocol):
    """What this module reads of `gpu_model.Gpu` (which calls it: no import back)."""

    bandwidth: float
    calibration: str

    def peak(self, dtype: str) -> float: ...

    def group_link(self, tp: int) -> float: ...


class KernelFit(Protocol):
    """What this module reads of `gpu_model.KernelFit`."""

    flop_frac: float


PARTS = ("moe_kernels", "moe_gemm", "moe_a2a")
# Grouped-GEMM bandwidth efficiency by the expert slice's width (moe_intermediate / split),
# from vLLM's benchmarks/kernels/benchmark_moe.py (CUDA-graph timed): time = latency +
# weight bytes / (eta x bandwidth) fitted through each series' batch-1 and batch-128 points.
# Log-linear between the widths, flat beyond them (docs/engine-priors.md, f.1).
ETA_BY_WIDTH = ((256, 0.66), (768, 0.78), (7168, 0.91))
# Range of the engine version's scale on eta: an untuned kernel configuration runs the same
# shape up to 1.6x slower than a tuned one, a later kernel (swap-AB, narrow N tiles) up to 1.21x
# faster (f.2).
SCALE_RANGE = (1 / 1.6, 1.21)
ALIGN_S = 16e-6  # moe_align_block_size at decode sizes (f.3: 9.4-27.6 us)
GEMM_LATENCY_S = 2e-6  # fixed time of one grouped GEMM beyond its bytes (f.3: 0.5-3.3 us)
BLOCK_M = (16, 64)  # vLLM's default block M: 16 while the step's tokens <= experts, else 64
FP8_SCALE_BYTES = 4 / 128  # a float32 scale per 128 activations (block-quantised fp8 input)
# All-to-all over the GPUs' links (f.4): the share of the EP group's per-direction link
# bandwidth (`Gpu.group_link`) DeepEP's intranode kernels reach, and the latency of one
# dispatch or combine.
A2A_LINK_FRAC = 0.88
A2A_LATENCY_S = 15e-6


def record() -> dict:
    """The priors an MoE layer is priced with, for a sidecar (the engine's scale is its own)."""
    return {
        "eta_by_width": [list(p) for p in ETA_BY_WIDTH],
        "scale_range": list(SCALE_RANGE),
        "align_s": ALIGN_S,
        "gemm_latency_s": GEMM_LATENCY_S,
        "block_m": list(BLOCK_M),
        "a2a_link_frac": A2A_LINK_FRAC,
        "a2a_latency_s": A2A_LATENCY_S,
        "routing_overlap": ROUTING_OVERLAP,
        "routing_overlap_range": list(ROUTING_OVERLAP_RANGE),
        "source": "docs/engine-priors.md, section f",
    }


def slice_eta(width: float) -> float:
    """The grouped GEMM's bandwidth efficiency on expert slices `width` wide."""
    w, eta = zip(*ETA_BY_WIDTH, strict=True)
    return float(np.interp(np.log2(width), np.log2(w), eta))


def padded_tokens(arch: Arch, par: Parallel, tokens: np.ndarray, touched: np.ndarray) -> np.ndarray:
    """Rows one GPU's grouped GEMM computes: each of the `touched` experts' tokens (its local
    share) rounded up to the block M (the mean per touched expert)."""
    n = np.asarray(tokens, np.float64)
    touched = np.asarray(touched, np.float64) / par.ep
    per_expert = n * arch.top_k / par.ep / np.maximum(touched, 1e-12)
    block = np.where(n <= arch.experts, *BLOCK_M)
    return touched * block * np.ceil(per_expert / block)


def gemm_shapes(arch: Arch, par: Parallel) -> tuple[float, list[tuple[int, float]]]:
    """(slice width, [(input width, output width) of w13 and w2]) of one GPU's expert slice."""
    width = arch.expert_intermediate / (1 if par.ep > 1 else par.tp)
    up = 2 if arch.gated else 1
    return width, [(arch.hidden, up * width), (width, arch.hidden)]


def gemm_memory_seconds(
    arch: Arch, par: Parallel, gpu: Gpu, tokens: np.ndarray, touched: np.ndarray
) -> np.ndarray:
    """The grouped GEMMs' memory time at scale 1 (weights and activations over eta x
    bandwidth): what the engine's scale divides (`engine_fit`)."""
    n = np.asarray(tokens, np.float64)
    width, shapes = gemm_shapes(arch, par)
    params = expert_weights(arch, par, touched)
    rows = n * arch.top_k / par.ep
    act = sum(rows * (d_in + d_out) * ACT_BYTES for d_in, d_out in shapes)
    return (params * par.weight_bytes + act) / (slice_eta(width) * gpu.bandwidth)


def gemm_seconds(
    arch: Arch,
    par: Parallel,
    gpu: Gpu,
    fit: KernelFit,
    tokens: np.ndarray,
    touched: np.ndarray,
    scale: float,
) -> np.ndarray:
    """Both grouped GEMMs: latency + max(compute on the padded rows, memory / scale); each
    GEMM's share of the memory time is its share of the weights."""
    width, shapes = gemm_shapes(arch, par)
    peak = gpu.peak(par.dtype)
    rows = padded_tokens(arch, par, tokens, touched)
    memory = gemm_memory_seconds(arch, par, gpu, tokens, touched) / scale
    total = sum(d_in * d_out for d_in, d_out in shapes)
    out = 0.0
    for d_in, d_out in shapes:
        compute = 2.0 * rows * d_in * d_out / (fit.flop_frac * peak)
        out = out + GEMM_LATENCY_S + np.maximum(compute, memory * d_in * d_out / total)
    return out


def kernel_bytes(arch: Arch, par: Parallel, tokens: np.ndarray) -> list[np.ndarray]:
    """Bytes each small kernel of the layer moves: top-k (the router logits), the weighted sum
    (top-k outputs in, one out) and fp8 input quantisation (bf16 in, fp8 and scales out)."""
    n = np.asarray(tokens, np.float64)
    rows = n * arch.top_k / par.ep
    _, shapes = gemm_shapes(arch, par)
    out = [n * arch.experts * 4.0, (rows + n) * arch.hidden * ACT_BYTES]
    if par.dtype == "fp8":
        for tokens_in, (d_in, _) in ((n, shapes[0]), (rows, shapes[1])):
            out.append(tokens_in * d_in * (ACT_BYTES + 1 + FP8_SCALE_BYTES))
    return out


def a2a_seconds(arch: Arch, par: Parallel, gpu: Gpu, tokens: np.ndarray) -> np.ndarray:
    """Dispatch and combine with expert parallelism: each GPU sends its 1/ep of the tokens'
    top-k copies to the (ep-1)/ep remote experts, fp8 (with scales) or bf16 out, bf16 back."""
    n = np.asarray(tokens, np.float64)
    if par.ep == 1:
        return np.zeros_like(n)
    link = A2A_LINK_FRAC * gpu.group_link(par.ep)
    copies = n / par.ep * arch.top_k * (par.ep - 1) / par.ep * arch.hidden
    sent = copies * ((1 + FP8_SCALE_BYTES) if par.dtype == "fp8" else ACT_BYTES)
    return 2 * A2A_LATENCY_S + (sent + copies * ACT_BYTES) / link


def layer_parts(
    arch: Arch,
    par: Parallel,
    gpu: Gpu,
    fit: KernelFit,
    tokens: np.ndarray,
    touched: np.ndarray,
    scale: float,
    elementwise: Callable[[np.ndarray], np.ndarray],
) -> dict[str, np.ndarray]:
    """Seconds of one MoE layer's parts (PARTS) on one GPU for a step of `tokens` rows that
    touches `touched` distinct experts (`arch.expected_experts`); `elementwise` prices a small
    kernel by its bytes (the step model's elementwise rule); zero for a dense model."""
    if not arch.moe:
        return dict.fromkeys(PARTS, np.zeros_like(np.asarray(tokens, np.float64)))
    return {
        "moe_kernels": ALIGN_S + sum(elementwise(b) for b in kernel_bytes(arch, par, tokens)),
        "moe_gemm": gemm_seconds(arch, par, gpu, fit, tokens, touched, scale),
        "moe_a2a": a2a_seconds(arch, par, gpu, tokens),
    }
