"""An MoE layer priced by its parts (dsim/hardware/moe.py): closed forms of the grouped GEMMs,
the distinct experts a step touches and the all-to-all's bytes; the engine's scale as the fit
uses it; a property that MoE time never falls as tokens grow."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsim.hardware import engine_fit, gpu_fit, moe, zoo
from dsim.hardware.arch import ACT_BYTES, Arch, Parallel, expected_experts
from dsim.hardware.engines import get_engine
from dsim.hardware.gpu_model import StepOverhead, elementwise_time, get_gpu, step_parts
from dsim.hardware.pricing import pricing

GPU = get_gpu("h200")
CAL = gpu_fit.calibration(GPU)
QWEN = zoo.load_arch("qwen3-30b-a3b")


def parts(arch: Arch, par: Parallel, tokens, scale: float = 1.0) -> dict[str, np.ndarray]:
    n = np.atleast_1d(np.asarray(tokens, np.float64))
    price = partial(elementwise_time, CAL.kernels, GPU)
    touched = expected_experts(arch.experts, arch.top_k, n, n)  # a token a request
    return moe.layer_parts(arch, par, GPU, CAL.kernels, n, touched, scale, price)


def test_one_expert_touched_costs_its_bytes_at_the_slice_efficiency_plus_two_latencies():
    """top-1 routing, one token: exactly one expert (E(1 - (1 - 1/E)^1) = 1); at TP 2 its
    slice is 768/2 wide, and each GEMM is memory-bound: latency + bytes / (eta x scale x W)."""
    arch = replace(QWEN, top_k=1)
    par, scale = Parallel(tp=2), 0.8
    one = np.array([1.0])
    assert expected_experts(arch.experts, 1, one, one)[0] == pytest.approx(1.0)
    w = arch.expert_intermediate / 2
    weights = 3 * arch.hidden * w * par.weight_bytes
    acts = ((arch.hidden + 2 * w) + (w + arch.hidden)) * ACT_BYTES
    want = 2 * moe.GEMM_LATENCY_S + (weights + acts) / (moe.slice_eta(w) * scale * GPU.bandwidth)
    got = moe.gemm_seconds(arch, par, GPU, CAL.kernels, one, one, scale)  # one expert
    assert got[0] == pytest.approx(want, rel=1e-12)
    assert parts(arch, par, 1.0, scale)["moe_gemm"][0] == pytest.approx(want, rel=1e-12)


def test_the_slice_efficiency_is_the_published_points_and_flat_beyond_them():
    for width, eta in moe.ETA_BY_WIDTH:
        assert moe.slice_eta(width) == pytest.approx(eta)
    widths = np.geomspace(32, 65536, 60)
    etas = [moe.slice_eta(w) for w in widths]
    assert np.all(np.diff(etas) >= 0)  # thinner slices, lower efficiency
    assert min(etas) == moe.ETA_BY_WIDTH[0][1] and max(etas) == moe.ETA_BY_WIDTH[-1][1]


def test_distinct_experts_and_padded_rows_never_fall_as_tokens_grow():
    n = np.arange(1.0, 4097.0)
    touched = expected_experts(QWEN.experts, QWEN.top_k, n, n)
    assert np.all(np.diff(touched) >= 0) and np.all(np.diff(touched[:256]) > 0)
    assert touched[-1] <= QWEN.experts
    assert touched[0] == pytest.approx(QWEN.top_k)  # one token: its k experts
    rows = moe.padded_tokens(QWEN, Parallel(), n, touched)
    assert np.all(np.diff(rows) >= -1e-9) and np.all(rows >= n * QWEN.top_k - 1e-9)
    # block M 16 up to as many tokens as experts, 64 beyond: one token pads its 8 experts to 16
    assert rows[0] == pytest.approx(QWEN.top_k * 16)


@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
def test_dispatch_and_combine_send_the_remote_copies_of_each_gpus_token_share(dtype):
    arch, n = zoo.load_arch("deepseek-v3"), np.array([64.0, 1024.0])
    par = Parallel(tp=8, ep=8, dtype=dtype)
    copies = n / 8 * arch.top_k * 7 / 8 * arch.hidden
    out = (1 + 4 / 128) if dtype == "fp8" else ACT_BYTES
    link = moe.A2A_LINK_FRAC * 450e9  # the H200's NVLink 4: 450 GB/s a direction, switched
    want = 2 * moe.A2A_LATENCY_S + copies * (out + ACT_BYTES) / link
    np.testing.assert_allclose(moe.a2a_seconds(arch, par, GPU, n), want, rtol=1e-12)
    assert not moe.a2a_seconds(arch, Parallel(tp=8, dtype=dtype), GPU, n).any()


def test_expert_parallelism_trades_the_mlp_all_reduce_of_moe_layers_for_dispatch_and_combine():
    arch = zoo.load_arch("deepseek-v3")
    n, r, c, pre = (np.array([v]) for v in (32.0, 32.0, 2048.0, False))
    tp = step_parts(arch, Parallel(tp=8), GPU, CAL.kernels, CAL.allreduce, n, r, c, pre)
    ep = step_parts(arch, Parallel(tp=8, ep=8), GPU, CAL.kernels, CAL.allreduce, n, r, c, pre)
    ratio = (2 * arch.layers - arch.moe_layers) / (2 * arch.layers)
    np.testing.assert_allclose(ep["allreduce"], tp["allreduce"] * ratio, rtol=1e-12)
    assert ep["moe_a2a"][0] > 0 and tp["moe_a2a"][0] == 0


def test_a_dense_model_has_no_moe_parts():
    arch = zoo.load_arch("qwen3-8b")
    assert all(not v.any() for v in parts(arch, Parallel(), [1.0, 64.0]).values())


def test_the_fits_moe_rows_are_memory_bound_so_a_step_is_linear_in_one_over_the_scale():
    """`engine_fit.moe_scale` solves in 1/scale: true only while the grouped GEMMs' memory
    time beats their compute over the scale's whole range, which each MoE row's step checks."""
    rows = engine_fit.fit_rows()
    for _, row in rows[rows["moe_mem_s"] > 0].iterrows():
        price = engine_fit.setup_pricing(row["setup"], row["version"])
        shape = [np.array([v]) for v in (row["seqs"], row["seqs"], row["context"])]
        for scale in moe.SCALE_RANGE:
            gpu = price.costs(StepOverhead(0.0, 0.0, moe_gemm_scale=scale), *shape, False)["gpu"]
            want = row["gpu_s"] + row["moe_mem_s"] * (1 / scale - 1)
            assert gpu[0] == pytest.approx(want, rel=1e-9), row["row"]


def test_qwen3_30b_a3b_on_one_h200_pays_gpu_work_not_a_borrowed_moe_constant():
    """The per-MoE-layer constant fitted on DeepSeek made a batch-1 step 17 ms against 3 ms of
    GPU work; by its parts the MoE is GPU work bounded by its bytes and latencies, and current
    vLLM's overlapped host time hides under it."""
    engine = get_engine("vllm", "h200")
    price = pricing("qwen3-30b-a3b", "h200", Parallel(), True, engine.graphs)
    for n in (1.0, 4.0, 16.0):
        shape = (np.array([n]), np.array([n]), np.array([2048.0]), np.array([False]))
        costs = price.costs(engine.terms, *shape)
        got = price.parts(*shape, engine.terms.moe_gemm_scale)
        moe_s = sum(float(got[k][0]) for k in moe.PARTS)
        touched = float(expected_experts(QWEN.experts, QWEN.top_k, np.array([n]), np.array([n]))[0])
        weights = touched * 3 * QWEN.hidden * QWEN.expert_intermediate * 2  # bf16 bytes
        per_layer = moe.ALIGN_S + 2 * moe.GEMM_LATENCY_S + 2 * 1e-5  # + two small kernels
        bound = QWEN.moe_layers * (per_layer + weights / (moe.ETA_BY_WIDTH[1][1] * GPU.bandwidth))
        assert weights * QWEN.moe_layers / GPU.bandwidth < moe_s < 1.1 * bound
        step = max(costs["gpu"][0], costs["host_overlapped"][0]) + costs["host_serialised"][0]
        assert step < 1.5 * costs["gpu"][0]


@given(
    experts=st.sampled_from([8, 64, 128, 256]),
    top_k=st.integers(1, 8),
    split=st.sampled_from([(1, 1), (2, 1), (8, 1), (8, 8)]),
    dtype=st.sampled_from(["bf16", "fp8"]),
    scale=st.floats(*moe.SCALE_RANGE),
    a=st.floats(1.0, 16384.0),
    b=st.floats(1.0, 16384.0),
)
def test_moe_time_never_falls_as_tokens_grow(experts, top_k, split, dtype, scale, a, b):
    arch = replace(zoo.load_arch("deepseek-v3"), experts=experts, top_k=top_k)
    par = Parallel(tp=split[0], ep=split[1], dtype=dtype)
    lo, hi = sorted((a, b))
    small, large = (sum(parts(arch, par, x, scale).values())[0] for x in (lo, hi))
    assert small <= large * (1 + 1e-12)
