"""Which elementwise operators of a layer each engine version runs fused (docs/engine-priors.md,
g; priors, not fitted: docs/engine-v2-rules.md, addendum 3).

A layer has Vidur's six eager operators (`gpu_model.elementwise_bytes`): two RMSNorms, RoPE, the
gated activation and two residual adds. A fused group is one kernel: one launch latency and one
pass over the bytes it reads from and writes to memory. Fusing a residual add into the RMSNorm
that follows it saves the norm's re-read of the sum (it still writes the sum: the next residual).
RoPE applied inside the attention op (its QKV preprocessing, which also writes the KV cache)
costs no elementwise pass of its own: the KV-cache write is priced in no engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPS = ("norm", "rope", "act", "add")  # the keys of gpu_model.elementwise_bytes
ADD_NORM = ("add", "norm")


@dataclass(frozen=True)
class Fusion:
    """The elementwise kernels of one layer: each group (operators fused into one kernel) and
    how many of it a layer runs; operators in `in_attention` run inside the attention op."""

    name: str
    groups: tuple[tuple[tuple[str, ...], int], ...]  # ((operators...), kernels per layer)
    source: str
    in_attention: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for ops, count in self.groups:
            if not ops or any(op not in OPS for op in ops) or count < 1:
                raise ValueError(f"fusion {self.name}: bad group {ops} x {count}")

    def kernels(self, nbytes: dict[str, np.ndarray]) -> list[tuple[int, np.ndarray]]:
        """(kernels per layer, bytes each moves) of every group, from the per-operator bytes."""
        return [(count, group_bytes(ops, nbytes)) for ops, count in self.groups]

    def record(self) -> dict:
        """What the sidecar says: the groups as strings, per layer, and the source."""
        return {
            "name": self.name,
            "kernels_per_layer": {"+".join(ops): count for ops, count in self.groups},
            "in_attention": list(self.in_attention),
            "source": self.source,
        }


def group_bytes(ops: tuple[str, ...], nbytes: dict[str, np.ndarray]) -> np.ndarray:
    """Bytes one fused group moves: its operators' bytes less the re-read fusion saves (add then
    RMSNorm: the norm no longer reads the sum back, half of its own read + write)."""
    total = sum(nbytes[op] for op in ops)
    if set(ADD_NORM) <= set(ops):
        total = total - nbytes["norm"] / 2
    return total


VLLM_INDUCTOR = (
    "vLLM V1 compiles the model with Inductor and disables its custom ops: 'By default, all "
    "custom ops are enabled when running without Inductor and disabled when running with "
    "Inductor ... Inductor generates (fused) Triton kernels for disabled custom ops' "
    "(vllm/config/compilation.py @ 002284db, CompilationConfig.custom_ops); RMSNorm's native "
    "form with a residual adds then normalises, one reduction kernel; SiluAndMul one "
    "pointwise kernel; RoPE (RotaryEmbedding.forward_native) a kernel of its own before the "
    "attention op, a graph split point. For fp8 the norm+quant and SiLU+quant passes "
    "(PassConfig.fuse_norm_quant, fuse_act_quant) fold the activation quantisation in too: "
    "dsim prices no quantisation kernel, so that fusion changes nothing here"
)
VLLM_08_INDUCTOR = (
    "vLLM 0.8 V1: VllmConfig.__post_init__ sets custom_ops = ['none'], use_inductor = True, "
    "level PIECEWISE for every non-eager V1 model (vllm/config.py, the V1 branch; stored "
    "copies agree [unpinned]), so Inductor fuses the residual add into RMSNorm and SiLU with "
    "the multiply as in current vLLM; RoPE stays a kernel of its own"
)
SGLANG_KERNELS = (
    "SGLang 0.4: RMSNorm.forward_cuda with a residual calls sgl_kernel.fused_add_rmsnorm "
    "(python/sglang/srt/layers/layernorm.py @ 000fc1a8); LlamaMLP uses SiluAndMul (one "
    "kernel) and LlamaAttention applies get_rope's rotary_emb before RadixAttention, a kernel "
    "of its own (python/sglang/srt/models/llama.py @ 00239548); no torch.compile by default"
)
TRTLLM_KERNELS = (
    "TensorRT-LLM (PyTorch backend): RMSNorm with a residual calls "
    "flashinfer_fused_add_rmsnorm (tensorrt_llm/_torch/modules/rms_norm.py @ 0419019a); the "
    "TRTLLM attention backend declares support_fused_rope() and support_fused_qkv() True, so "
    "RoPE runs in the attention op's QKV preprocessing, which writes the KV cache "
    "[unpinned: tensorrt_llm/_torch/attention_backend/trtllm.py, several stored copies agree]; "
    "NIM 1.8.0's engine presumed to fuse the same way"
)
EAGER_2023 = (
    "vLLM 2023 eager, as Vidur profiled it and as the Splitwise overhead was fitted: two "
    "RMSNorm kernels, a separate residual add twice per layer, silu_and_mul and "
    "rotary_embedding custom kernels; vLLM fused the add into RMSNorm only in PR #1667 "
    "(merged 2023-11-19, 'Support fused add rmsnorm for LLaMA'), after the Splitwise runs"
)

UNFUSED = Fusion(
    "eager (Vidur's six kernels)",
    ((("norm",), 2), (("rope",), 1), (("act",), 1), (("add",), 2)),
    EAGER_2023,
)
_FUSED_GROUPS = ((ADD_NORM, 2), (("rope",), 1), (("act",), 1))
FUSIONS: dict[str, Fusion] = {
    "vllm": Fusion("add+RMSNorm, SiLU-and-mul, RoPE (Inductor)", _FUSED_GROUPS, VLLM_INDUCTOR),
    "vllm-0.8": Fusion(
        "add+RMSNorm, SiLU-and-mul, RoPE (Inductor)", _FUSED_GROUPS, VLLM_08_INDUCTOR
    ),
    "sglang": Fusion("fused_add_rmsnorm, silu_and_mul, RoPE", _FUSED_GROUPS, SGLANG_KERNELS),
    "trtllm": Fusion(
        "fused add+RMSNorm, SiLU-and-mul, RoPE in attention",
        ((ADD_NORM, 2), (("act",), 1)),
        TRTLLM_KERNELS,
        in_attention=("rope",),
    ),
    "vllm-2023": UNFUSED,
}
FUSIONS["gpu-only"] = FUSIONS["vllm"]  # current vLLM's GPU work without its host time


def fusion(version: str) -> Fusion:
    """The fusion prior of an engine version (a preset name of `engines.ENGINES`)."""
    return FUSIONS[version]
