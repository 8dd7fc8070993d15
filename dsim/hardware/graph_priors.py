"""The CUDA-graph rule of each engine version: the sizes it captures, how it keys and pads them,
and the host launch time of what graphs do not cover (docs/engine-priors.md, a and b; priors,
not fitted: docs/engine-v2-rules.md, addendum 6)."""

from __future__ import annotations

from dsim.hardware.gpu_model import GPUS, Graphs

# Host launch time of a step that graphs do not cover (docs/engine-v2-rules.md, addendum 6):
# about ten kernels a layer at ~5 us of host dispatch each when nothing is graphed, and the
# attention kernel with its metadata when the rest of the layer is a piecewise graph.
EAGER_LAYER_S = 60e-6  # prior, range 20-150 us per layer
PIECEWISE_LAYER_S = 15e-6  # prior, range 5-40 us per layer
VLLM_SIZES_08 = (1, 2, 4, *range(8, 513, 8))
VLLM_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
SGLANG_SIZES = (1, 2, 4, 8, *range(16, 161, 8))
SGLANG_SIZES_BIG = (*SGLANG_SIZES, *range(168, 257, 8))  # GPUs of more than 81,920 MiB


def graphs(version: str, gpu: str | None) -> Graphs | None:
    """The CUDA-graph rule of an engine version (docs/engine-priors.md, a and b)."""
    launch = dict(eager_layer_s=EAGER_LAYER_S, piecewise_layer_s=PIECEWISE_LAYER_S)
    if version == "vllm-0.8":
        return Graphs(
            "tokens",
            VLLM_SIZES_08,
            "piecewise",
            "piecewise",
            **launch,
            source=(
                "vLLM 0.8 V1: piecewise graphs (attention eager) for every step up to 512 tokens, "
                "sizes [1, 2, 4] + 8..512 step 8 (config.py _set_cudagraph_sizes @ 0004438)"
            ),
        )
    if version == "vllm":
        return Graphs(
            "tokens",
            VLLM_SIZES,
            "full",
            "piecewise",
            **launch,
            source=(
                "vLLM >= 0.11: FULL_AND_PIECEWISE (full graphs for uniform decode and verify, "
                "piecewise for the rest), sizes [1, 2, 4] + 8..248 step 8 + 256..512 step 16, "
                "largest min(2 x max_num_seqs x (1+K), 512) = 512 at the default max_num_seqs "
                "(config/compilation.py @ 002284d); eager past the largest"
            ),
        )
    if version == "sglang":
        big = gpu is not None and GPUS[gpu].memory_bytes > 81920 * 2**20
        return Graphs(
            "requests",
            SGLANG_SIZES_BIG if big else SGLANG_SIZES,
            "full",
            "eager",
            **launch,
            source=(
                "SGLang 0.4: full graphs keyed by requests, [1, 2, 4, 8] + 16..160 step 8, "
                "+ 168..256 on GPUs above 81,920 MiB "
                "(cuda_graph_runner.get_batch_sizes_to_capture); "
                "padding on; prefill and larger batches run eagerly"
            ),
        )
    return None
