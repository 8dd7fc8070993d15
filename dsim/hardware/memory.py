"""How each serving engine sizes its KV cache and which KV dtype it keeps by default
(docs/design.md, Engine presets; profiles/README.md, Memory).

An engine reserves a share of GPU memory and gives what its weights leave to the KV cache; the
engines differ in what the share is of:

- vLLM: `gpu_memory_utilization` (0.9) of the GPU's total memory holds weights, activations
  and the KV cache: KV = 0.9 x total - weights.
- TensorRT-LLM: `free_gpu_memory_fraction` (0.9) of the memory free once weights (and the
  engine's activations) are loaded: KV = 0.9 x (total - weights).
- SGLang: `mem_fraction_static` of total memory holds weights and the KV pool, the rest is left
  to activations and CUDA graphs; unset, it is (total - reserved) / total, the reserve growing
  with the GPU's memory class and the TP degree: KV = fraction x total - weights.

Activations and CUDA graphs' memory are not subtracted beyond what a rule itself sets aside, so
each capacity is an upper bound. The KV cache's dtype is the model's (bf16 activations) unless
the user names one; TensorRT-LLM keeps an fp8 checkpoint's cache in fp8.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsim.hardware.dtypes import AUTO, REQUESTED_KV

MIB = 2**20
VLLM_FRACTION = 0.9  # vllm/config/cache.py gpu_memory_utilization default
TRTLLM_FRACTION = 0.9  # tensorrt_llm.llmapi.KvCacheConfig free_gpu_memory_fraction default

VLLM_SOURCE = (
    "vLLM: gpu_memory_utilization 0.9 of the GPU's total memory for weights, activations and "
    "the KV cache (vllm/config/cache.py; the worker's log: 'total_gpu_memory (..GiB) x "
    "gpu_memory_utilization (0.90)'); recompute preemption of the newest request when a "
    "decode step's KV does not fit"
)
TRTLLM_SOURCE = (
    "TensorRT-LLM: KvCacheConfig.free_gpu_memory_fraction 0.9 'of free GPU memory' after the "
    "weights are loaded (nvidia.github.io/TensorRT-LLM llm-api/reference/KvCacheConfig.html, "
    "examples/kvcacheconfig.html); KvCacheConfig.dtype 'auto' inherits the checkpoint's KV "
    "quantization (features/quantization.html), FP8 in NVIDIA's ModelOpt fp8 checkpoints "
    "(kv_cache_quant_algo FP8), so an fp8 checkpoint keeps an fp8 cache"
)
SGLANG_SOURCE = (
    "SGLang: mem_fraction_static of total memory for weights and the KV pool; unset, "
    "(total - reserved) / total rounded to 3 decimals, reserved = (9.5 + TP/2) GiB below "
    "90 GiB of GPU memory (H100, A100), (12 + TP/2) GiB below 160 GiB (H20, H200), 32 GiB "
    "above (B200, MI300) (sgl-project/sglang python/sglang/srt/server_args.py since PR #7054, "
    "2025-06-10; the dynamic default at commit 11e7c9e0e6535eefdebafc28bc5bbf0d998a1e16, "
    "sgl-project/sglang #29092; SGLang 0.4 had 0.88/0.87/0.85/0.81/0.79 by TP 1/2/4/8/16); "
    "--kv-cache-dtype auto: the model's dtype"
)


@dataclass(frozen=True)
class MemoryRule:
    """An engine's KV sizing: the share of memory it reserves (None: SGLang's computed
    default), of what, and the KV dtype it keeps for an fp8 checkpoint when the user names
    none."""

    engine: str
    share: float | None
    of: str  # "total": share x total - weights; "free": share x (total - weights)
    fp8_checkpoint_kv: str  # the KV dtype `auto` means for an fp8 checkpoint
    source: str

    def fraction(self, memory_bytes: float, tp: int) -> float:
        """The share of memory the rule reserves on a GPU of `memory_bytes` at `tp` GPUs."""
        if self.share is not None:
            return self.share
        mib = memory_bytes / MIB
        reserved = (9.5 + tp / 2) if mib < 90 * 1024 else (12 + tp / 2) if mib < 160 * 1024 else 32
        return round((mib - reserved * 1024) / mib, 3)

    def kv_bytes(self, memory_bytes: float, weights: float, tp: int) -> float:
        """KV-cache bytes per GPU: what the reserved share leaves after the weights (<= 0:
        the weights do not fit)."""
        share = self.fraction(memory_bytes, tp)
        if self.of == "free":
            return share * (memory_bytes - weights)
        return share * memory_bytes - weights

    def kv_dtype(self, requested: str, dtype: str) -> str:
        """The KV dtype the engine keeps: the user's, or for `auto` the model's (bf16: fp8
        checkpoints compute in bf16) except where the engine keeps an fp8 checkpoint's cache
        in fp8."""
        kv = REQUESTED_KV.parse(requested)
        if kv != AUTO:
            return kv
        return self.fp8_checkpoint_kv if dtype == "fp8" else "bf16"

    def record(self, memory_bytes: float, tp: int, dtype: str) -> dict:
        """What the sidecar's memory entry says about the rule."""
        return {
            "engine_rule": self.engine,
            "fraction": self.fraction(memory_bytes, tp),
            "fraction_of": "total memory" if self.of == "total" else "memory free after weights",
            "kv_dtype_default": self.kv_dtype("auto", dtype),
            "source": self.source,
        }


VLLM = MemoryRule("vllm", VLLM_FRACTION, "total", "bf16", VLLM_SOURCE)
RULES = {
    "vllm": VLLM,
    "vllm-0.8": VLLM,
    "vllm-2023": VLLM,
    "gpu-only": VLLM,  # the perfect engine keeps vLLM's scheduling and memory
    "sglang": MemoryRule("sglang", None, "total", "bf16", SGLANG_SOURCE),
    "trtllm": MemoryRule("trtllm", TRTLLM_FRACTION, "free", "fp8", TRTLLM_SOURCE),
}


def rule(engine: str) -> MemoryRule:
    """The memory rule of preset `engine` (a name `engines.get_engine` has accepted)."""
    return RULES[engine]
