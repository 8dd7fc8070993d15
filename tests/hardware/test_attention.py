"""Decode attention priors (dsim/hardware/attention.py): every engine version names its kernels
with a source; a long-context decode step costs its KV bytes at the kernel's bandwidth; prefill
keeps the linear fit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dsim.hardware import attention
from dsim.hardware.arch import Parallel, kv_bytes_per_token_layer
from dsim.hardware.engines import ENGINES
from dsim.hardware.gpu_model import GPUS, KernelFit, attention_time, linear_time
from dsim.hardware.zoo import load_arch

FIT = KernelFit(0.7, 0.95, 2.0, 5e-6, 2e-6, 0.8)
GPU = GPUS["h100"]
ARCH = load_arch("llama3.1-8b")
PAR = Parallel()


def _decode(kernel, seqs, context):
    r, c = np.asarray(seqs, np.float64), np.asarray(context, np.float64)
    return attention_time(ARCH, PAR, GPU, FIT, r * c, r * c, False, kernel)


def test_every_engine_version_names_its_kernels_with_a_source():
    for name in ENGINES:
        b = attention.backend(name)
        for kernel in (b.gqa, b.mla, b.mla_ampere):
            assert kernel.source.strip() and kernel.name, name
        assert b.source.strip(), name


def test_mla_models_take_the_mla_kernel_on_hopper():
    dsv3 = load_arch("deepseek-v3")
    vllm = attention.backend("vllm")
    assert vllm.kernel(dsv3, GPUS["h200"].calibration) is attention.FLASHMLA
    assert vllm.kernel(dsv3, GPUS["a100"].calibration) is attention.TRITON
    assert vllm.kernel(ARCH, GPUS["h200"].calibration) is attention.FLASH_ATTN


def test_flashmla_prior_is_its_readme_figure():
    assert attention.FLASHMLA.bw_frac == round(3000 / 3350, 3)


def test_long_context_decode_is_kv_bytes_over_the_kernels_bandwidth():
    seqs, context = 64.0, 131072.0
    kv = seqs * context * kv_bytes_per_token_layer(ARCH, PAR.tp, PAR.kv_bytes)
    for kernel in (attention.FLASH_ATTN, attention.FLASHINFER, attention.FLASHMLA):
        want = kv / (kernel.bw_frac * GPU.bandwidth)
        np.testing.assert_allclose(_decode(kernel, seqs, context), want, rtol=2e-3)


def test_decode_is_the_soft_roofline_at_the_kernels_fraction():
    r, c = np.array([1.0, 8.0]), np.array([512.0, 4096.0])
    d_qk, d_v = ARCH.attn_dims()
    flops = 2.0 * r * c * ARCH.heads * (d_qk + d_v)
    nbytes = r * c * kv_bytes_per_token_layer(ARCH, PAR.tp, PAR.kv_bytes)
    k = attention.FLASHINFER
    fit = KernelFit(FIT.flop_frac, k.bw_frac, FIT.knee_p, FIT.kernel_s, 0.0, 1.0)
    want = linear_time(fit, GPU, flops, nbytes, GPU.flops)
    np.testing.assert_allclose(_decode(k, r, c), want, rtol=1e-12)


def test_prefill_keeps_the_linear_fit_and_the_2023_preset_keeps_it_for_decode():
    r, c = np.array([4.0]), np.array([2048.0])
    kv, pairs = r * c, r * c
    fitted = attention_time(ARCH, PAR, GPU, FIT, kv, pairs, True, attention.FLASHMLA)
    legacy = attention_time(ARCH, PAR, GPU, FIT, kv, pairs, False, attention.GEMM_FIT)
    np.testing.assert_allclose(fitted, legacy, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    seqs=st.integers(1, 512),
    context=st.integers(1, 200_000),
    extra=st.integers(1, 100_000),
    name=st.sampled_from(sorted(ENGINES)),
)
def test_decode_attention_never_falls_as_context_grows(seqs, context, extra, name):
    kernel = attention.backend(name).gqa
    short, long = _decode(kernel, seqs, context), _decode(kernel, seqs, context + extra)
    assert long >= short
