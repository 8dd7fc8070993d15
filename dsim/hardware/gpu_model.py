"""Step time of a transformer on GPUs from its shapes and fitted efficiencies (docs/design.md,
step-time model).

Each linear operator costs `kernel + (t_c^p + t_m^p)^(1/p)`, a smooth knee between its compute
time t_c = flops / (flop_frac * peak) and memory time t_m = bytes / (bw_frac * bandwidth);
norms, rotary embedding, activation and residual adds cost `elem_kernel + bytes / (elem_bw_frac
* bandwidth)` per kernel, grouped into kernels as the engine fuses them (`fusion`); attention is
the same soft roofline over the KV bytes read and its flops, decode at its kernel's published
bandwidth efficiency (`attention`); tensor parallelism adds two measured all-reduces per layer;
the LM head runs on the tokens that need logits; a per-step overhead (an engine preset's terms
per step, layer, MoE layer, sequence and sampled token) covers the serving engine's own work.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, replace
from typing import Any

import numpy as np

from dsim.errors import InputError
from dsim.hardware.arch import (
    ACT_BYTES,
    Arch,
    Parallel,
    expert_weights,
    kv_heads_per_gpu,
    layer_linears,
)
from dsim.hardware.attention import GEMM_FIT, AttentionKernel, work
from dsim.hardware.fusion import UNFUSED, Fusion


@dataclass(frozen=True)
class Gpu:
    """Datasheet figures (dense tensor-core peaks, HBM bandwidth) and which fit it uses."""

    flops: float
    flops_fp8: float
    bandwidth: float
    memory_bytes: float
    calibration: str  # the GPU whose measured operators and all-reduces it borrows


# Memory as the driver reports it (nvidia-smi memory.total, MiB), which is what the engines'
# shares are of: the "80 GB" A100 and H100 hold 80 GiB, less what the driver keeps on the H100
# (modal-labs/modal-client #2797: H100 81559 MiB, A100 80GB 81920 MiB); the "141 GB" H200
# 143771 MiB (NVIDIA/cuda-samples #311).
MIB = 2**20
GPUS: dict[str, Gpu] = {
    "a100": Gpu(312e12, 312e12, 2.039e12, 81920 * MIB, "a100"),  # fp8: weight-only, bf16 math
    "h100": Gpu(989e12, 1979e12, 3.35e12, 81559 * MIB, "h100"),
    # H200 = H100's chip (same SMs, clocks, NVLink) with 141 GB of 4.8 TB/s HBM3e: it borrows
    # H100's fitted fractions and all-reduce table; only the bandwidth and memory differ.
    "h200": Gpu(989e12, 1979e12, 4.8e12, 143771 * MIB, "h100"),
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
    """What a serving engine adds to a step's GPU work (an engine preset's terms,
    `dsim/hardware/engines.py`; docs/design.md, The step-time model):

    - serialised host time, paid after the GPU work: fixed per step, per layer, per running
      sequence and per sampled token (every verify token; the last token of a prefill prompt);
    - overlapped host time (an engine that schedules step N+1 while the GPU runs step N): per
      step and per sequence, hidden unless it outlasts the GPU work;
    - `per_moe_layer_s`, GPU work the roofline does not price: seconds per MoE layer of the
      engine's MoE kernels beyond what their shapes cost (routing, permutation, the fused-MoE
      kernels' shortfall), inside the GPU work and not scaled by `--overhead-scale`.
    """

    per_layer_s: float
    per_seq_s: float
    per_step_s: float = 0.0
    per_moe_layer_s: float = 0.0
    per_token_s: float = 0.0
    overlap_step_s: float = 0.0
    overlap_seq_s: float = 0.0

    def scaled(self, factor: float) -> StepOverhead:
        """Every host term times `factor` (`--overhead-scale`); the GPU term stays."""
        scaled = StepOverhead(*(factor * v for v in astuple(self)))
        return replace(scaled, per_moe_layer_s=self.per_moe_layer_s)

    def seconds(self, arch: Arch, seqs: np.ndarray, sampled: np.ndarray) -> np.ndarray:
        """The serialised host time of steps over `seqs` sequences sampling `sampled` tokens."""
        r, n = np.asarray(seqs, np.float64), np.asarray(sampled, np.float64)
        fixed = self.per_step_s + self.per_layer_s * arch.layers
        return fixed + self.per_seq_s * r + self.per_token_s * n

    def overlapped(self, seqs: np.ndarray) -> np.ndarray:
        """The host time the engine overlaps with the GPU work of steps over `seqs` sequences."""
        return self.overlap_step_s + self.overlap_seq_s * np.asarray(seqs, np.float64)

    def moe_gpu(self, arch: Arch) -> float:
        """GPU seconds a step's MoE layers cost beyond their priced shapes."""
        return self.per_moe_layer_s * arch.moe_layers


GRAPH_MODES = ("full", "piecewise", "eager")


@dataclass(frozen=True)
class Graphs:
    """Where an engine replays CUDA graphs (docs/engine-priors.md, a and b): the sizes it
    captures, keyed by a step's tokens (vLLM) or requests (SGLang), and the mode a decode or
    verify step (`decode`) and a step carrying prefill (`prefill`) run in within the largest
    size: `full` (one graph: no launches), `piecewise` (graph pieces, attention and its
    metadata launched from the host) or `eager` (every kernel launched from the host). A
    graphed decode step runs padded up to the next captured size (a staircase); past the
    largest size a step runs eagerly, unpadded. Launches are host time overlapped with the
    GPU work (the launch queue runs ahead)."""

    keyed_by: str  # "tokens" or "requests"
    sizes: tuple[int, ...]  # captured sizes, increasing
    decode: str  # full, piecewise or eager
    prefill: str  # piecewise or eager (no engine runs prefill as one full graph here)
    eager_layer_s: float  # host seconds per layer launching a step without graphs
    piecewise_layer_s: float  # host seconds per layer of a piecewise step (eager attention)
    source: str

    def __post_init__(self) -> None:
        check_sizes(self.sizes, "capture sizes")
        if self.keyed_by not in ("tokens", "requests"):
            raise InputError(None, None, f"graphs keyed by {self.keyed_by!r}: tokens or requests")
        for name, mode in (("decode", self.decode), ("prefill", self.prefill)):
            if mode not in GRAPH_MODES:
                raise InputError(
                    None,
                    None,
                    f"unknown {name} graph mode {mode!r}; known: {', '.join(GRAPH_MODES)}",
                )

    def _key(self, tokens: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        return np.asarray(tokens if self.keyed_by == "tokens" else seqs, np.float64)

    def padded(self, tokens: np.ndarray, seqs: np.ndarray, prefill: np.ndarray) -> np.ndarray:
        """Tokens the GPU runs: a graphed decode step within the largest size padded to the
        next captured size."""
        n = np.asarray(tokens, np.float64)
        if self.decode == "eager":
            return n
        sizes = np.asarray(self.sizes, np.float64)
        key = self._key(n, seqs)
        graphed = ~np.asarray(prefill, bool) & (key <= sizes[-1])
        up = sizes[np.minimum(np.searchsorted(sizes, key), len(sizes) - 1)]
        return np.where(graphed, n * up / np.maximum(key, 1.0), n)

    def launches(
        self, tokens: np.ndarray, seqs: np.ndarray, prefill: np.ndarray, layers: int
    ) -> np.ndarray:
        """Host seconds per step launching what the graphs do not cover."""
        per_mode = {"full": 0.0, "piecewise": self.piecewise_layer_s, "eager": self.eager_layer_s}
        within = self._key(tokens, seqs) <= self.sizes[-1]
        mode_s = np.where(np.asarray(prefill, bool), per_mode[self.prefill], per_mode[self.decode])
        return layers * np.where(within, mode_s, self.eager_layer_s)


def check_sizes(sizes: tuple[int, ...], what: str) -> tuple[int, ...]:
    """`sizes` as positive integers in increasing order (InputError naming `what` otherwise)."""
    ok = bool(sizes) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes
    )
    if not ok or any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
        raise InputError(
            None, None, f"{what} must be positive integers in increasing order, got {list(sizes)}"
        )
    return sizes


@dataclass(frozen=True)
class SpecRound:
    """An engine's speculative machinery per round, beyond the target's verify pass and the
    drafter's GPU work (`dsim/hardware/round_fit.py`): per round (rejection sampling, input
    preparation, the host work the engine stops overlapping while it speculates) and the host
    time of one proposer step, the floor under every drafter pass (a pass costs the longer of
    its GPU work and that host time: small drafters are host-bound)."""

    per_round_s: float = 0.0
    host_pass_s: float = 0.0

    def scaled(self, factor: float) -> SpecRound:
        """Both terms times `factor` (`--overhead-scale`)."""
        return SpecRound(*(factor * v for v in astuple(self)))

    def pass_seconds(self, gpu_s: Any) -> Any:
        """One drafter pass whose GPU work takes `gpu_s` (seconds, or an array of them): the
        one rule that prices a pass."""
        if isinstance(gpu_s, float):
            return gpu_s if gpu_s > self.host_pass_s else self.host_pass_s
        return np.maximum(gpu_s, self.host_pass_s)


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


def layer_time(
    arch: Arch,
    par: Parallel,
    gpu: Gpu,
    fit: KernelFit,
    tokens: np.ndarray,
    dense_mlp: bool,
    fusion: Fusion = UNFUSED,
) -> dict[str, np.ndarray]:
    """Seconds of one layer's linear and elementwise operators (no attention, no all-reduce);
    the elementwise ones as `fusion` groups them into kernels."""
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
        count * elementwise_time(fit, gpu, nbytes)
        for count, nbytes in fusion.kernels(elementwise_bytes(arch, par, n, dense_mlp))
    )
    return {"linear": linear, "elementwise": elem}


def attention_time(
    arch: Arch,
    par: Parallel,
    gpu: Gpu,
    fit: KernelFit,
    kv_tokens: np.ndarray,
    pairs: np.ndarray,
    prefill: np.ndarray | bool = True,
    kernel: AttentionKernel = GEMM_FIT,
) -> np.ndarray:
    """Attention of one layer on one GPU (`attention.work`: flops and KV bytes) on the linear
    operators' soft roofline; decode rows read KV at `kernel`'s bandwidth fraction, prefill rows
    at the fitted one."""
    flops, nbytes = work(arch, par, kv_tokens, pairs)
    fitted = linear_time(fit, gpu, flops, nbytes, gpu.flops)
    if kernel.bw_frac is None:
        return fitted
    decode = linear_time(replace(fit, bw_frac=kernel.bw_frac), gpu, flops, nbytes, gpu.flops)
    return np.where(prefill, fitted, decode)


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
    fusion: Fusion = UNFUSED,
    attention: AttentionKernel | None = None,
) -> dict[str, np.ndarray]:
    """Seconds by component of one step on one GPU of the replica, without the step overhead:
    elementwise kernels as `fusion` groups them, decode attention at `attention`'s bandwidth
    (default: Vidur's eager kernels and the GEMM fit, the calibration's own pricing).

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
    kernel = attention or GEMM_FIT
    parts = {"linear": 0.0, "elementwise": 0.0}
    dense_layers = arch.dense_layers if arch.moe else arch.layers
    for count, dense in ((dense_layers, True), (arch.moe_layers, False)):
        if count:
            for key, value in layer_time(arch, par, gpu, fit, n, dense, fusion).items():
                parts[key] = parts[key] + count * value
    parts["attention"] = arch.layers * attention_time(
        arch, par, gpu, fit, r * c, pairs, pre, kernel
    )
    parts["allreduce"] = 2 * arch.layers * allreduce.time(n * arch.hidden * ACT_BYTES, par.tp)
    head = arch.vocab // par.tp * arch.hidden
    head_bytes = head * ACT_BYTES + logits * (arch.hidden + arch.vocab / par.tp) * ACT_BYTES
    parts["lm_head"] = linear_time(fit, gpu, 2.0 * logits * head, head_bytes, gpu.flops)
    return {k: np.broadcast_to(v, n.shape).astype(np.float64) for k, v in parts.items()}


def step_seconds(costs: dict[str, np.ndarray]) -> np.ndarray:
    """Seconds of a step from its `step_costs`: max(GPU work, overlapped host time) +
    serialised host time."""
    return np.maximum(costs["gpu"], costs["host_overlapped"]) + costs["host_serialised"]


def step_costs(
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
    graphs: Graphs | None = None,
    fusion: Fusion = UNFUSED,
    attention: AttentionKernel | None = None,
) -> dict[str, np.ndarray]:
    """A step's costs in seconds: `gpu` (the GPU work at the tokens the graphs run, the MoE
    shortfall included) and its `padding` share; `host_overlapped` (the engine's overlapped
    host time plus the launches graphs do not cover) and `launches`; `host_serialised`."""
    n = np.asarray(tokens, np.float64)
    run = n if graphs is None else graphs.padded(n, seqs, prefill)
    setup = (arch, par, gpu, fit, allreduce)
    kernels = {"fusion": fusion, "attention": attention}
    gpu_s = sum(step_parts(*setup, run, seqs, context, prefill, **kernels).values())
    gpu_s = gpu_s + overhead.moe_gpu(arch)
    padding = np.zeros_like(gpu_s)
    if graphs is not None:
        bare = sum(step_parts(*setup, n, seqs, context, prefill, **kernels).values())
        padding = gpu_s - bare - overhead.moe_gpu(arch)
    launches = (
        np.zeros_like(gpu_s) if graphs is None else graphs.launches(n, seqs, prefill, arch.layers)
    )
    return {
        "gpu": gpu_s,
        "padding": padding,
        "host_overlapped": overhead.overlapped(seqs) + launches,
        "launches": launches,
        "host_serialised": overhead.seconds(arch, seqs, sampled_tokens(n, seqs, prefill)),
    }


def sampled_tokens(tokens: np.ndarray, seqs: np.ndarray, prefill: np.ndarray) -> np.ndarray:
    """Tokens a step samples: every verify token, the last token of each prefill prompt."""
    return np.where(np.asarray(prefill, bool), np.asarray(seqs), np.asarray(tokens))
