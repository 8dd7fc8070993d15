"""Elementwise fusion priors (dsim/hardware/fusion.py): a fused group is one kernel latency plus
one pass over its bytes; unfused operators cost one of each per operator."""

from __future__ import annotations

import numpy as np
import pytest

from dsim.hardware import fusion
from dsim.hardware.arch import ACT_BYTES, Parallel
from dsim.hardware.engines import ENGINES
from dsim.hardware.gpu_model import GPUS, KernelFit, elementwise_bytes, layer_time
from dsim.hardware.zoo import load_arch

FIT = KernelFit(0.7, 0.9, 2.0, 5e-6, 2e-6, 0.8)  # round numbers: closed forms stay exact
GPU = GPUS["h100"]
ARCH = load_arch("llama3.1-8b")
N = np.array([1.0, 64.0, 2048.0])


def _kernel(nbytes):
    return FIT.elem_kernel_s + nbytes / (FIT.elem_bw_frac * GPU.bandwidth)


def _elementwise(f: fusion.Fusion) -> np.ndarray:
    return layer_time(ARCH, Parallel(), GPU, FIT, N, True, f)["elementwise"]


def test_every_engine_version_has_a_fusion_prior_with_a_source():
    for name in ENGINES:
        prior = fusion.fusion(name)
        assert prior.source.strip(), name
        assert prior.record()["kernels_per_layer"], name


def test_unfused_layer_is_one_kernel_per_operator():
    b = elementwise_bytes(ARCH, Parallel(), N, True)
    want = 2 * _kernel(b["norm"]) + _kernel(b["rope"]) + _kernel(b["act"]) + 2 * _kernel(b["add"])
    np.testing.assert_allclose(_elementwise(fusion.UNFUSED), want, rtol=1e-12)


def test_fused_add_norm_is_one_kernel_over_its_reads_and_writes():
    # add: read x and the residual, write the sum; norm: read the sum, write its output.
    # Fused: read x and the residual, write the sum (next residual) and the output: 4 n h.
    b = elementwise_bytes(ARCH, Parallel(), N, True)
    group = fusion.group_bytes(fusion.ADD_NORM, b)
    np.testing.assert_allclose(group, 4 * N * ARCH.hidden * ACT_BYTES, rtol=1e-12)
    want = 2 * _kernel(group) + _kernel(b["rope"]) + _kernel(b["act"])
    np.testing.assert_allclose(_elementwise(fusion.fusion("vllm")), want, rtol=1e-12)


def test_rope_inside_attention_costs_no_elementwise_pass():
    b = elementwise_bytes(ARCH, Parallel(), N, True)
    trt = fusion.fusion("trtllm")
    assert trt.in_attention == ("rope",)
    want = 2 * _kernel(fusion.group_bytes(fusion.ADD_NORM, b)) + _kernel(b["act"])
    np.testing.assert_allclose(_elementwise(trt), want, rtol=1e-12)


def test_fusion_never_costs_more_than_the_eager_kernels():
    eager = _elementwise(fusion.UNFUSED)
    for name in ENGINES:
        assert np.all(_elementwise(fusion.fusion(name)) <= eager), name


def test_a_bad_group_is_refused():
    with pytest.raises(ValueError, match="bad group"):
        fusion.Fusion("x", ((("softmax",), 1),), "none")
