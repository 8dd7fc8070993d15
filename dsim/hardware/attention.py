"""What attention reads and computes, and which kernel each engine version runs it with
(docs/engine-priors.md, h; priors, not fitted: docs/engine-v2-rules.md, addendum 3).

A decode or verify row reads every context token's KV once: `gpu_model.attention_time` prices
its score/value flops and KV bytes (`work`) on the soft roofline, the bytes at the decode
kernel's own bandwidth efficiency, a published figure per kernel (`AttentionKernel`), not the
GEMMs' fitted one. A prefill row keeps the linear operators' fitted efficiencies (no published
prefill figure is adopted). The 2023 preset keeps the GEMM fit for decode too, the pricing its
overhead was fitted with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from dsim.hardware.arch import Arch, Parallel, kv_bytes_per_token_layer


@dataclass(frozen=True)
class AttentionKernel:
    """A decode attention kernel: the fraction of HBM bandwidth it reads KV at (None: the GEMMs'
    fitted fraction), its published range, the GPU it was measured on, and the source."""

    name: str
    bw_frac: float | None
    low: float
    high: float
    measured_on: str
    source: str

    def __post_init__(self) -> None:
        if self.bw_frac is not None and not 0 < self.low <= self.bw_frac <= self.high <= 1:
            raise ValueError(f"attention kernel {self.name}: need 0 < low <= frac <= high <= 1")


FLASHINFER_PAPER = (
    "FlashInfer paper (Ye et al., arXiv:2501.01005, MLSys 2025), decode kernel benchmarks on "
    "A100-40GB and H100-80GB over constant, uniform and Zipf length batches: FlashInfer "
    "reached 70-83% of peak bandwidth in skewed batches against about 45% for FlashAttention "
    "(read through the summary at wentao.site/flashinfer_summary; the figure itself not read)"
)
FLASHINFER = AttentionKernel(
    "FlashInfer batch decode", 0.76, 0.70, 0.83, "A100, H100", FLASHINFER_PAPER
)
FLASH_ATTN = AttentionKernel(
    "FlashAttention split-KV decode (FA3 on Hopper, FA2 on Ampere)",
    0.64,
    0.45,
    0.83,
    "A100, H100",
    "the midpoint of the published range: about 45% of peak bandwidth in skewed batches "
    "(FlashAttention in the FlashInfer paper's decode benchmark) up to FlashInfer's 83% on "
    "the same benchmark; no published uniform-length FA3 decode bandwidth was found; "
    + FLASHINFER_PAPER,
)
FLASHMLA = AttentionKernel(
    "FlashMLA",
    round(3000 / 3350, 3),
    0.75,
    round(3000 / 3350, 3),
    "H800 SXM5 (the H100 chip, 3.35 TB/s)",
    "deepseek-ai/FlashMLA README: 'Achieving up to 3000 GB/s in memory-bound configuration "
    "and 580 TFLOPS in computation-bound configuration on H800 SXM5, using CUDA 12.8' (also "
    "docs/20250422-new-kernel-deep-dive.md: '3000 GB/s in memory-intensive settings'); 3000 / "
    "3350 GB/s; 'up to', so the figure is the range's top",
)
XQA = AttentionKernel(
    "TensorRT-LLM XQA",
    FLASHINFER.bw_frac,
    0.45,
    0.90,
    "none published (borrowed)",
    "no published XQA bandwidth figure was found (the XQA blog gives throughput at a latency "
    "budget, not bandwidth): FlashInfer's figure borrowed, with the range widened to every "
    "published decode figure here",
)
TRITON = AttentionKernel(
    "Triton decode attention",
    FLASH_ATTN.bw_frac,
    0.45,
    0.83,
    "none published (borrowed)",
    "no published bandwidth figure for the Triton decode kernels (SGLang's MLA default in 0.4, "
    "vLLM's Triton MLA on Ampere) was found: FlashAttention's prior borrowed",
)
GEMM_FIT = AttentionKernel(
    "vLLM 2023 PagedAttention (priced with the GEMMs' fitted efficiency)",
    None,
    0.0,
    0.0,
    "Vidur's operator rows",
    "kept as the pricing the Splitwise overhead was fitted with (no measured attention times "
    "in the calibration data), so the 2023 preset reproduces",
)

VLLM_BACKENDS = (
    "vLLM V1 selects FLASH_ATTN for MHA/GQA on CUDA (FA3 on Hopper) and FLASHMLA for MLA on "
    "Hopper, Triton MLA elsewhere (vllm/platforms/cuda.py get_attn_backend_cls; the backend "
    "table of docs/design/cuda_graphs.md @ 0045689b) [selection code unpinned]"
)
SGLANG_BACKENDS = (
    "SGLang 0.4.4-0.4.5: --attention-backend defaults to flashinfer when it is installed; MLA "
    "decode runs the Triton kernels unless --enable-flashinfer-mla (store_true, off by "
    "default) or FlashMLA is asked for (python/sglang/srt/server_args.py [unpinned])"
)
TRTLLM_BACKENDS = (
    "TensorRT-LLM runs generation attention with XQA for MQA/GQA by default "
    "(docs/source/advanced/gpt-attention.md, XQA optimization) and its own MLA generation "
    "kernels, priced with the same borrowed prior"
)


@dataclass(frozen=True)
class Backend:
    """The decode kernels an engine version runs by default: for MHA/GQA and for MLA models,
    on Hopper and on Ampere."""

    gqa: AttentionKernel
    mla: AttentionKernel
    mla_ampere: AttentionKernel
    source: str

    def kernel(self, arch: Arch, calibration: str) -> AttentionKernel:
        """The kernel a model with `arch` decodes with on a GPU of `calibration`'s family."""
        if not arch.mla:
            return self.gqa
        return self.mla_ampere if calibration == "a100" else self.mla


BACKENDS: dict[str, Backend] = {
    "vllm": Backend(FLASH_ATTN, FLASHMLA, TRITON, VLLM_BACKENDS),
    "vllm-0.8": Backend(FLASH_ATTN, FLASHMLA, TRITON, VLLM_BACKENDS),
    "sglang": Backend(FLASHINFER, TRITON, TRITON, SGLANG_BACKENDS),
    "trtllm": Backend(XQA, XQA, XQA, TRTLLM_BACKENDS),
    "vllm-2023": Backend(GEMM_FIT, GEMM_FIT, GEMM_FIT, GEMM_FIT.source),
}
BACKENDS["gpu-only"] = BACKENDS["vllm"]  # current vLLM's GPU work without its host time


def backend(version: str) -> Backend:
    """The decode attention kernels of an engine version (a preset name)."""
    return BACKENDS[version]


def record(kernel: AttentionKernel) -> dict:
    """What the sidecar says about the decode kernel a setup uses."""
    return asdict(kernel)


def work(
    arch: Arch, par: Parallel, kv_tokens: np.ndarray, pairs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Score/value flops (bf16 math) and KV bytes of one layer's attention on one GPU.

    `kv_tokens` is the context tokens whose KV the step reads (summed over sequences), `pairs`
    the (query, key) pairs it scores.
    """
    d_qk, d_v = arch.attn_dims()
    flops = 2.0 * pairs * (arch.heads // par.tp) * (d_qk + d_v)
    return flops, kv_tokens * kv_bytes_per_token_layer(arch, par.tp, par.kv_bytes)
