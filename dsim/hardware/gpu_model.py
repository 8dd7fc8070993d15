"""Step time of a transformer on GPUs from its shapes and fitted efficiencies (docs/design.md,
step-time model).

Each linear operator costs `kernel + (t_c^p + t_m^p)^(1/p)`, a smooth knee between its compute
time t_c = flops / (flop_frac * peak) and memory time t_m = bytes / (bw_frac * bandwidth);
norms, rotary embedding, activation and residual adds cost `elem_kernel + bytes / (elem_bw_frac
* bandwidth)` per kernel, grouped into kernels as the engine fuses them (`fusion`); attention is
the same soft roofline over the KV bytes read and its flops, decode at its kernel's published
bandwidth efficiency (`attention`); tensor parallelism adds two measured all-reduces per layer;
an MoE layer's experts are priced by their parts (`moe`); the LM head runs on the tokens that
need logits; a per-step overhead (an engine preset's terms per step, layer, sequence and
sampled token) covers the serving engine's own work.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from dsim.checks import check_sizes
from dsim.errors import InputError
from dsim.hardware import moe
from dsim.hardware.arch import (
    ACT_BYTES,
    Arch,
    Parallel,
    kv_heads_per_gpu,
    layer_linears,
    step_experts,
)
from dsim.hardware.attention import GEMM_FIT, AttentionKernel, work
from dsim.hardware.fusion import UNFUSED, Fusion

# The relative range stated on the GPU work of a GPU fitted on its own operator data (the
# operator fit's median error, tests/hardware/test_gpu_estimate.py; held-out end-to-end median
# 5.7%): a GPU that borrows another's fit states a wider one.
BRACKET_MEASURED = 0.15


@dataclass(frozen=True)
class Gpu:
    """Datasheet figures (dense tensor-core peaks, HBM bandwidth, memory as the driver reports
    it, GPU-to-GPU link bandwidth) and which measured GPU's fit it uses."""

    flops: float  # dense bf16
    flops_fp8: float  # dense fp8 (A100: its bf16 peak, fp8 being weight-only there)
    bandwidth: float
    memory_bytes: float
    calibration: str  # the GPU whose measured operators and all-reduces it borrows
    flops_fp4: float = 0.0  # dense fp4 (MXFP4/NVFP4); 0: no fp4 tensor cores
    link_bytes_per_s: float = 0.0  # GPU-to-GPU bandwidth, per direction, all links together
    mesh_links: int = 0  # 0: a switch (NVSwitch); else one point-to-point link per peer
    vendor: str = "nvidia"
    bracket: float = BRACKET_MEASURED  # stated relative range on the GPU work
    sources: tuple[str, ...] = ()

    def peak(self, dtype: str) -> float:
        """The dense tensor-core peak the weights' dtype runs its GEMMs at."""
        return {"fp8": self.flops_fp8, "fp4": self.flops_fp4}.get(dtype, self.flops)

    def group_link(self, tp: int) -> float:
        """Bandwidth (per direction) one GPU has to the other tp - 1 of its TP group: all of it
        through a switch; on a point-to-point mesh only the tp - 1 links to the group's peers."""
        if self.mesh_links:
            return self.link_bytes_per_s * min(tp - 1, self.mesh_links) / self.mesh_links
        return self.link_bytes_per_s


MIB = 2**20
HGX = (
    "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200 / HGX B300 per 8 GPUs; vendor page "
    "named, its figures read here through the pages below)"
)
HGX_TABLE = (
    "https://fibermall.com/blog/?p=17161 (HGX B200 / B300 table: BF16 36, FP8 72 PFLOPS with "
    "sparsity, NVLink 1.8 TB/s a GPU; HGX B300 FP4 144 PFLOPS)"
)
GLENN_B200 = "https://glennklockwood.com/garden/processors/B200 (HGX B200 at 1,000 W, per GPU)"
B200_SMI = "NVIDIA/TensorRT-LLM #10278 (nvidia-smi: NVIDIA B200 183359MiB)"
MI300X_PAGE = (
    "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (vendor page named, "
    "figures read here through the pages below)"
)
MI355X_PAGE = (
    "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html (vendor page named, "
    "figures read here through the pages below)"
)
ROCM_SPECS = "https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html (VRAM GiB, CUs)"
# Memory as the driver reports it (nvidia-smi memory.total, MiB; rocm-smi VRAM Total Memory,
# bytes), which is what the engines' shares are of: the "80 GB" A100 and H100 hold 80 GiB, less
# what the driver keeps on the H100 (modal-labs/modal-client #2797: H100 81559 MiB, A100 80GB
# 81920 MiB); the "141 GB" H200 143771 MiB (NVIDIA/cuda-samples #311); the "180 GB" B200
# 183359 MiB. No driver report of a B300 or an MI355X was found: each is derived from its
# sibling's, the same driver-visible share of 1.5x the HBM (B300: 8 stacks of 36 GiB against
# the B200's 8 of 24 GiB; MI355X: 288 GiB against the MI300X's 192 GiB, ROCm's spec table).
B200_MIB = 183359
MI300X_BYTES = 206141652992  # rocm-smi, ROCm/legacy-rocm-build #4750
GPUS: dict[str, Gpu] = {
    "a100": Gpu(  # fp8: weight-only, bf16 math
        312e12, 312e12, 2.039e12, 81920 * MIB, "a100", link_bytes_per_s=300e9
    ),
    "h100": Gpu(989e12, 1979e12, 3.35e12, 81559 * MIB, "h100", link_bytes_per_s=450e9),
    # H200 = H100's chip (same SMs, clocks, NVLink) with 141 GB of 4.8 TB/s HBM3e: it borrows
    # H100's fitted fractions and all-reduce table; only the bandwidth and memory differ.
    "h200": Gpu(989e12, 1979e12, 4.8e12, 143771 * MIB, "h100", link_bytes_per_s=450e9, bracket=0.2),
    # Blackwell (HGX B200, 1,000 W): per GPU the HGX board's dense figures / 8 (BF16 36 PFLOPS
    # sparse, FP8 72 sparse, FP4 144 sparse | 72 dense), 8 TB/s HBM3e (the driver's 7,680-bit
    # bus at 3,996 MHz gives 7.67 TB/s, pytorch/ao #4002), NVLink 5: 1.8 TB/s both ways.
    "b200": Gpu(
        2.25e15,
        4.5e15,
        8e12,
        B200_MIB * MIB,
        "h100",
        flops_fp4=9e15,
        link_bytes_per_s=900e9,
        bracket=0.3,
        sources=(
            HGX,
            HGX_TABLE,
            GLENN_B200,
            B200_SMI,
            "pytorch/ao #4002 (bf16 2.25e15, fp8 4.5e15, fp4 9e15)",
        ),
    ),
    # Blackwell Ultra (HGX B300): BF16 and FP8 as B200's; FP4 144 PFLOPS sparse | 108 dense per
    # 8 GPUs (NVIDIA's HGX listing as recalled; a third-party table gives 144 without sparsity
    # and GB300 is marketed at 15 dense: the dense fp4 peak lies in 13.5-18 PFLOPS, 13.5 taken);
    # 288 GB HBM3e at 8 TB/s, NVLink 5.
    "b300": Gpu(
        2.25e15,
        4.5e15,
        8e12,
        B200_MIB * 3 // 2 * MIB,
        "h100",
        flops_fp4=13.5e15,
        link_bytes_per_s=900e9,
        bracket=0.3,
        sources=(
            HGX,
            HGX_TABLE,
            "NVIDIA/cosmos-framework #114 (HGX B300 dense BF16 2.25e15 per GPU)",
            "https://acecloud.ai/blog/nvidia-hgx-b300 (288 GB, 8 TB/s, NVLink 5 1.8 TB/s)",
            "memory: derived from the B200's driver report (see above)",
        ),
    ),
    # CDNA 3: 1,307.4 TFLOPS dense BF16, 2,614.9 FP8 (AMD's figures; the pages read give ~1.3 and
    # ~2.6 PFLOPS), no FP4; 5.3 TB/s HBM3; Infinity Fabric: 7 links of 128 GB/s both ways, one to
    # each peer of an 8-GPU node (a mesh, no switch).
    "mi300x": Gpu(
        1307.4e12,
        2614.9e12,
        5.3e12,
        MI300X_BYTES,
        "h100",
        link_bytes_per_s=7 * 64e9,
        mesh_links=7,
        vendor="amd",
        bracket=0.5,
        sources=(
            MI300X_PAGE,
            "https://gpu.blog/gpus/instinct-mi300x-mi300x (xGMI 896 GB/s, 8-GPU mesh)",
            "https://www.jaredwatkins.com/research/ai-accelerators/amd-instinct/mi300-series/ "
            "(192 GB HBM3, 5.3 TB/s, ~1.3 PFLOPS FP16, ~2.6 PFLOPS FP8)",
            "https://www.emergentmind.com/topics/amd-mi300x-gpu (128 GB/s bidirectional a link)",
            "ROCm/legacy-rocm-build #4750 (rocm-smi VRAM Total Memory 206141652992 B)",
        ),
    ),
    # CDNA 4: 2,516.6 TFLOPS dense BF16, 5,033.2 FP8, 10,066.3 MXFP4 (AMD's figures; the pages
    # read give 5 PFLOPS FP8 and 10 FP4, bf16 half of fp8 as on every matrix core here); 8 TB/s
    # HBM3E; Infinity Fabric: 7 links of 153.6 GB/s both ways (a mesh).
    "mi355x": Gpu(
        2516.6e12,
        5033.2e12,
        8e12,
        MI300X_BYTES * 3 // 2,
        "h100",
        flops_fp4=10066.3e12,
        link_bytes_per_s=7 * 76.8e9,
        mesh_links=7,
        vendor="amd",
        bracket=0.5,
        sources=(
            MI355X_PAGE,
            "https://www.theregister.com/2025/06/12/amd_mi355x/ (10 PFLOPS FP4, 288 GB, 8 TB/s)",
            "https://www.world-today-news.com/?p=7253162 (ISSCC 2026: 5 PFLOPS FP8)",
            "https://humeconsulting.co/amd-mi355x-strong-node-level-inference-but-not-yet-rack-"
            "scale (Infinity Fabric ~153 GB/s a link)",
            ROCM_SPECS,
            "memory: derived from the MI300X's rocm-smi report (see above)",
        ),
    ),
}


def get_gpu(name: str) -> Gpu:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise InputError(None, None, f"unknown GPU {name!r}; known: {', '.join(GPUS)}") from None


def check_dtype(name: str, dtype: str) -> None:
    """Refuse fp4 weights on a GPU without fp4 tensor cores (one line)."""
    if dtype == "fp4" and not get_gpu(name).flops_fp4:
        have = ", ".join(k for k, g in GPUS.items() if g.flops_fp4)
        raise InputError(
            None,
            None,
            f"GPU {name.lower()} has no fp4 tensor cores: use --dtype bf16 or fp8, or a GPU "
            f"with them ({have})",
        )


def transfer(name: str) -> str:
    """What a GPU borrows from the measured GPU it is calibrated on, in words ('' if none)."""
    spec = get_gpu(name)
    cal = GPUS[spec.calibration]
    if spec.calibration == name:
        return ""
    other = spec.vendor != cal.vendor
    kernels = " (another vendor's kernels: ROCm libraries, not CUDA's)" if other else ""
    mesh = (
        f"; a mesh of {spec.mesh_links} links: a TP group of n uses n - 1"
        if spec.mesh_links
        else ""
    )
    return (
        f"{name} is not fitted: it borrows {spec.calibration}'s fitted operator efficiencies "
        f"(flop_frac, bw_frac, knee, kernel times){kernels} at its own datasheet peaks, HBM "
        f"bandwidth and memory, and {spec.calibration}'s measured all-reduce table with its "
        f"bandwidth scaled by the link bandwidth ratio ({spec.link_bytes_per_s / 1e9:g} GB/s "
        f"over {cal.link_bytes_per_s / 1e9:g} GB/s per direction{mesh}), latencies unchanged; "
        f"GPU work bracket +-{spec.bracket:.0%} (a measured GPU's: +-{BRACKET_MEASURED:.0%})"
    )


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
    - `moe_gemm_scale`, the engine's grouped-GEMM bandwidth efficiency as a multiple of the
      published kernels' (`moe.SCALE_RANGE`; fitted per engine version on its MoE rows, 1 where
      it has none): GPU work, not scaled by `--overhead-scale`.
    """

    per_layer_s: float
    per_seq_s: float
    per_step_s: float = 0.0
    moe_gemm_scale: float = 1.0
    per_token_s: float = 0.0
    overlap_step_s: float = 0.0
    overlap_seq_s: float = 0.0

    def scaled(self, factor: float) -> StepOverhead:
        """Every host term times `factor` (`--overhead-scale`); the GPU term stays."""
        scaled = StepOverhead(*(factor * v for v in astuple(self)))
        return replace(scaled, moe_gemm_scale=self.moe_gemm_scale)

    def seconds(self, arch: Arch, seqs: np.ndarray, sampled: np.ndarray) -> np.ndarray:
        """The serialised host time of steps over `seqs` sequences sampling `sampled` tokens."""
        r, n = np.asarray(seqs, np.float64), np.asarray(sampled, np.float64)
        fixed = self.per_step_s + self.per_layer_s * arch.layers
        return fixed + self.per_seq_s * r + self.per_token_s * n

    def overlapped(self, seqs: np.ndarray) -> np.ndarray:
        """The host time the engine overlaps with the GPU work of steps over `seqs` sequences."""
        return self.overlap_step_s + self.overlap_seq_s * np.asarray(seqs, np.float64)


GRAPH_MODES = ("full", "piecewise", "eager")


def next_captured(key: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """Each key (tokens or requests) up to the largest captured size rounded up to the next
    captured size, the graph a step of it replays; keys past the largest unchanged."""
    caps = np.asarray(sizes, np.float64)
    up = caps[np.minimum(np.searchsorted(caps, key), len(caps) - 1)]
    return np.where(key <= caps[-1], up, key)


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
        key = self._key(n, seqs)
        graphed = ~np.asarray(prefill, bool) & (key <= self.sizes[-1])
        return np.where(graphed, n * next_captured(key, self.sizes) / np.maximum(key, 1.0), n)

    def launches(
        self, tokens: np.ndarray, seqs: np.ndarray, prefill: np.ndarray, layers: int
    ) -> np.ndarray:
        """Host seconds per step launching what the graphs do not cover."""
        per_mode = {"full": 0.0, "piecewise": self.piecewise_layer_s, "eager": self.eager_layer_s}
        within = self._key(tokens, seqs) <= self.sizes[-1]
        mode_s = np.where(np.asarray(prefill, bool), per_mode[self.prefill], per_mode[self.decode])
        return layers * np.where(within, mode_s, self.eager_layer_s)


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

    def __init__(
        self,
        fits: dict[int, tuple[float, float]],
        gpu: str,
        scale: dict[int, float] | None = None,
    ) -> None:
        self.fits = fits  # workers -> (latency s, bus bandwidth bytes/s)
        self.gpu = gpu
        self.scale = scale or {}  # workers -> bandwidth ratio to the measured table (borrowed)

    def scaled(self, ratios: dict[int, float]) -> AllReduce:
        """The measured table with its bandwidth times the link bandwidth ratio per GPU count
        (a GPU that borrows it); latencies as measured."""
        fits = {w: (lat, bw * ratios[w]) for w, (lat, bw) in self.fits.items()}
        return AllReduce(fits, self.gpu, dict(ratios))

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
    """Seconds of one layer's linear and elementwise operators (no attention, no all-reduce,
    no routed experts: `moe`); the elementwise ones as `fusion` groups them into kernels."""
    n = np.asarray(tokens, np.float64)
    peak = gpu.peak(par.dtype)
    wb = par.weight_bytes
    linear = np.zeros_like(n)
    for _, params, d_in, d_out in layer_linears(arch, par, dense_mlp):
        nbytes = params * wb + n * (d_in + d_out) * ACT_BYTES
        linear = linear + linear_time(fit, gpu, 2.0 * n * params, nbytes, peak)
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


def attention_groups(
    arch: Arch,
    pairs: np.ndarray,
    seqs: np.ndarray,
    chunk: np.ndarray,
    context: np.ndarray,
    prefill: np.ndarray,
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(layers, KV tokens read, (query, key) pairs) of the full-attention layers (`pairs`) and
    of the sliding-window ones, where a query at position p scores min(p, window) keys and a
    sequence's KV read is at most `window` tokens (FlashAttention's window_size, FlashInfer's
    window_left, TensorRT-LLM's per-layer attention window)."""
    groups = [(arch.kv_layers, seqs * context, pairs)] if arch.kv_layers else []
    if arch.window_layers:
        w = float(arch.window)
        first = context - chunk + 1  # a prefill chunk's first query position
        top = np.minimum(context, w)  # queries at positions <= window score every earlier key
        below = np.where(top >= first, (first + top) * (top - first + 1) / 2, 0.0)
        chunk_pairs = below + w * (context - np.maximum(first - 1, top))
        windowed = np.where(prefill, chunk_pairs, chunk * top)
        groups.append((arch.window_layers, seqs * top, seqs * windowed))
    return groups


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
    moe_scale: float = 1.0,
    fusion: Fusion = UNFUSED,
    attention: AttentionKernel | None = None,
    routed_tokens: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Seconds by component of one step on one GPU of the replica, without the step overhead:
    an MoE layer's parts at the engine's grouped-GEMM scale `moe_scale`, elementwise kernels as
    `fusion` groups them, decode attention at `attention`'s bandwidth (default: Vidur's eager
    kernels and the GEMM fit, the calibration's own pricing).

    Verify/decode rows: `tokens` B over `seqs` R, each reading `context` C of KV; every token
    needs logits. Prefill rows: `tokens` P over `seqs` prompts, chunks of n = P/R ending at
    context C (causal: each chunk scores n*(C - (n-1)/2) pairs); only the last token of each
    prompt needs logits (vLLM). `routed_tokens`: the requests' own tokens among `tokens`
    (default all), consecutive per sequence; the rest are a graph's padding rows, routed each
    on its own as before (`arch.step_experts`; `step_costs`).
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
    price = partial(elementwise_time, fit, gpu)
    routed = n if routed_tokens is None else routed_tokens
    touched = step_experts(arch, n, routed, r) if arch.moe else np.zeros_like(n)
    for key, value in moe.layer_parts(arch, par, gpu, fit, n, touched, moe_scale, price).items():
        parts[key] = arch.moe_layers * value
    parts["attention"] = sum(
        layers * attention_time(arch, par, gpu, fit, kv, p, pre, kernel)
        for layers, kv, p in attention_groups(arch, pairs, r, chunk, c, pre)
    )
    reduces = 2 * arch.layers - (arch.moe_layers if par.ep > 1 else 0)  # EP: dispatch/combine
    parts["allreduce"] = reduces * allreduce.time(n * arch.hidden * ACT_BYTES, par.tp)
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
    """A step's costs in seconds: `gpu` (the GPU work at the tokens the graphs run) and its
    `padding` share; `host_overlapped` (the engine's overlapped host time plus the launches
    graphs do not cover) and `launches`; `host_serialised`."""
    n = np.asarray(tokens, np.float64)
    run = n if graphs is None else graphs.padded(n, seqs, prefill)
    setup = (arch, par, gpu, fit, allreduce)
    kernels = {"moe_scale": overhead.moe_gemm_scale, "fusion": fusion, "attention": attention}
    gpu_s = sum(
        step_parts(*setup, run, seqs, context, prefill, **kernels, routed_tokens=n).values()
    )
    padding = np.zeros_like(gpu_s)
    if graphs is not None:
        padding = gpu_s - sum(step_parts(*setup, n, seqs, context, prefill, **kernels).values())
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
