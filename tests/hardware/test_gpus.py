"""The GPUs dsim borrows a calibration for (B200, B300, MI300X, MI355X), fp4 weights, engines
per GPU, and gpt-oss's sliding-window attention: figures with sources, the borrowed all-reduce
in closed form, refusals in one line, and the window's pairs and KV in closed form."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import run_cli

from dsim.hardware import gpu_fit, zoo
from dsim.hardware.arch import Parallel, kv_bytes_per_token_layer
from dsim.hardware.collectives import CustomAllReduce, fit_physics
from dsim.hardware.dtypes import MXFP4_BYTES
from dsim.hardware.gpu_model import (
    BRACKET_MEASURED,
    GPUS,
    attention_groups,
    attention_time,
    step_parts,
    transfer,
)
from dsim.hardware.memory import VLLM_FRACTION
from dsim.hardware.roofline import roofline_profile, weight_bytes_per_gpu

NEW = ("b200", "b300", "mi300x", "mi355x")
FP4 = ("b200", "b300", "mi355x")
GIB = 2**30


# --- figures and what is borrowed --------------------------------------------------------------


@pytest.mark.parametrize("gpu", NEW)
def test_new_gpus_carry_datasheet_figures_with_sources_and_borrow_h100(gpu):
    spec = GPUS[gpu]
    assert spec.calibration == "h100" and spec.sources
    assert spec.flops > GPUS["h100"].flops and spec.flops_fp8 == pytest.approx(
        2 * spec.flops, rel=1e-3
    )
    assert spec.bandwidth >= 5.3e12 and spec.link_bytes_per_s > 0
    assert 179 * GIB < spec.memory_bytes < 288 * GIB  # the driver's figure, below the label
    assert (spec.flops_fp4 > spec.flops_fp8) == (gpu in FP4)
    assert spec.bracket > BRACKET_MEASURED
    assert spec.mesh_links == (7 if spec.vendor == "amd" else 0)


@pytest.mark.parametrize("gpu", [*NEW, "h200"])
def test_every_borrowing_gpu_says_so_in_its_sidecar(gpu):
    _, meta = roofline_profile(gpu, "llama3.1-8b", contexts=[1024])
    said = meta["transfer"]
    assert said.startswith(f"{gpu} is not fitted: it borrows h100's") and "all-reduce" in said
    assert f"+-{GPUS[gpu].bracket:.0%}" in said
    assert meta["bracket"]["gpu_work_relative"] > meta["bracket"]["measured_gpu"]
    point = meta["breakdown_ms"]["decode B=1 R=1 C=2048"]
    assert point["step_low"] <= point["step"] < point["step_high"]
    assert meta["gpu_figures"]["sources"] == list(GPUS[gpu].sources)
    assert ("another vendor's kernels" in said) == (GPUS[gpu].vendor == "amd")


@pytest.mark.parametrize("gpu", ["h100", "a100"])
def test_measured_gpus_borrow_nothing(gpu):
    assert transfer(gpu) == ""
    assert GPUS[gpu].bracket == BRACKET_MEASURED


def test_blackwell_is_faster_than_h100_where_decode_reads_weights():
    h100, _ = roofline_profile("h100", "llama3.1-8b", contexts=[1024], engine="gpu-only")
    for gpu in NEW:
        df, _ = roofline_profile(gpu, "llama3.1-8b", contexts=[1024], engine="gpu-only")
        one = (df["phase"] == "verify") & (df["batch_tokens"] == 1)
        assert (df[one]["latency_ms"].to_numpy() < h100[one]["latency_ms"].to_numpy()).all()


# --- the all-reduce: H100's table scaled by the link bandwidth ratio ---------------------------


def test_borrowed_allreduce_is_h100s_scaled_by_the_links_a_group_uses():
    h100 = gpu_fit.allreduce_table("h100")
    assert gpu_fit.borrowed_allreduce(GPUS["h200"]) is h100  # same NVLink: the table itself
    for gpu, ratio in (
        ("b200", lambda w: 900e9 / 450e9),  # NVSwitch: every GPU count gets all of NVLink 5
        ("mi300x", lambda w: (w - 1) * 64e9 / 450e9),  # mesh: w - 1 links of 64 GB/s
        ("mi355x", lambda w: (w - 1) * 76.8e9 / 450e9),
    ):
        table = gpu_fit.borrowed_allreduce(GPUS[gpu])
        for w, (lat, bw) in h100.fits.items():
            assert table.fits[w] == (lat, pytest.approx(bw * ratio(w)))
            size = np.array([64.0 * 2**20])
            assert table.time(size, w) == pytest.approx(lat + size / (bw * ratio(w)))


def test_engine_custom_allreduce_scales_its_link_bandwidth_too():
    physics = fit_physics()
    nbytes = np.array([4096.0 * 2])  # one token's hidden state: one-shot at TP 2
    b200 = CustomAllReduce(physics, gpu_fit.borrowed_allreduce(GPUS["b200"]))
    expected = physics.latency_1_s + nbytes / (2 * physics.link_bw)
    assert b200.time(nbytes, 2) == pytest.approx(expected)


# --- fp4 and the engines each GPU runs ---------------------------------------------------------


@pytest.mark.parametrize("gpu", ["h100", "h200", "a100", "mi300x"])
def test_fp4_is_refused_where_the_gpu_has_no_fp4_tensor_cores(monkeypatch, capsys, tmp_path, gpu):
    out = tmp_path / "p.csv"
    args = ["profile", "--roofline", gpu, "--model", "gpt-oss-20b", "--dtype", "fp4"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--out", str(out))
    assert code == 2 and err.count("\n") == 1, err
    assert f"GPU {gpu} has no fp4 tensor cores" in err and "b200, b300, mi355x" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("gpu", FP4)
def test_fp4_weights_are_mxfp4_bytes_at_the_fp4_peak(gpu):
    arch = zoo.load_arch("llama3.1-8b")
    total, _ = arch.param_counts()
    assert MXFP4_BYTES == 0.5 + 1 / 32
    assert weight_bytes_per_gpu(arch, Parallel(dtype="fp4")) == total * MXFP4_BYTES
    df4, meta = roofline_profile(gpu, "llama3.1-8b", contexts=[1024], dtype="fp4")
    df8, _ = roofline_profile(gpu, "llama3.1-8b", contexts=[1024], dtype="fp8")
    assert meta["parallel"]["dtype"] == "fp4" and "weights_fp4" in meta
    assert (df4["latency_ms"] <= df8["latency_ms"]).all()
    assert meta["memory"]["kv_dtype"] == "bf16"  # an MXFP4 checkpoint carries no KV quantization


@pytest.mark.parametrize("gpu", ["mi300x", "mi355x"])
def test_tensorrt_llm_is_refused_on_amd_and_vllm_sglang_run(monkeypatch, capsys, tmp_path, gpu):
    out = tmp_path / "p.csv"
    args = ["profile", "--roofline", gpu, "--model", "llama3.1-8b", "--engine", "trtllm"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--out", str(out))
    assert code == 2 and err.count("\n") == 1, err
    assert f"engine trtllm does not run on {gpu}" in err
    assert list(tmp_path.iterdir()) == []
    for engine in ("vllm", "sglang"):
        _, meta = roofline_profile(gpu, "llama3.1-8b", contexts=[1024], engine=engine)
        assert meta["engine"]["name"] == engine


# --- memory: the rule refuses what does not fit, per new GPU -----------------------------------


@pytest.mark.parametrize("gpu", NEW)
def test_memory_rule_refuses_a_model_that_does_not_fit(monkeypatch, capsys, tmp_path, gpu):
    out = tmp_path / "p.csv"
    args = ["profile", "--roofline", gpu, "--model", "qwen3-235b-a22b", "--out", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1, err
    gib = GPUS[gpu].memory_bytes / GIB
    assert f"leaving no KV cache in {gpu}'s {gib:.1f} GiB" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("gpu", NEW)
def test_kv_capacity_is_vllms_share_of_the_drivers_memory(gpu):
    arch = zoo.load_arch("llama3.3-70b")
    par = Parallel(tp=2, dtype="fp8", kv_dtype="bf16")
    _, meta = roofline_profile(gpu, "llama3.3-70b", contexts=[1024], tp=2, dtype="fp8")
    budget = VLLM_FRACTION * GPUS[gpu].memory_bytes - weight_bytes_per_gpu(arch, par)
    per_token = arch.layers * kv_bytes_per_token_layer(arch, 2, 2)
    assert meta["memory"]["kv_capacity_tokens"] == int(budget // per_token)


# --- gpt-oss: MoE with sliding-window layers ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "layers", "experts", "total"),
    [("gpt-oss-120b", 36, 128, 116.8e9), ("gpt-oss-20b", 24, 32, 20.9e9)],
)
def test_gpt_oss_architecture_from_its_config(name, layers, experts, total):
    arch = zoo.load_arch(name)
    assert (arch.layers, arch.experts, arch.top_k, arch.expert_intermediate) == (
        layers,
        experts,
        4,
        2880,
    )
    assert (arch.window, arch.window_layers, arch.kv_layers) == (128, layers // 2, layers // 2)
    assert arch.param_counts()[0] == pytest.approx(total, rel=0.002)


@pytest.mark.parametrize("field", ["window_layers", "dense_layers"])
def test_a_shape_with_more_special_layers_than_layers_is_refused(field):
    """Windowed or dense layers beyond the layer count would price negative attention or KV."""
    arch = zoo.load_arch("gpt-oss-20b")
    with pytest.raises(ValueError, match="cannot hold"):
        dataclasses.replace(arch, layers=1, **{field: 2})


def test_near_miss_gpt_oss_names_are_suggested():
    with pytest.raises(Exception, match="did you mean 'gpt-oss-20b'"):
        zoo.load_fields("gpt-oss-20")


def test_window_pairs_closed_form():
    """A prefill chunk of 4 ending at position 130 with a 128-token window: its queries at
    127..130 score 127, 128, 128, 128 keys; decode at context C scores min(C, 128)."""
    arch = zoo.load_arch("gpt-oss-20b")
    c, chunk, seqs = np.array([130.0, 100.0, 9000.0]), np.array([4.0, 4.0, 1.0]), np.ones(3)
    pre = np.array([True, True, False])
    full = np.ones(3)
    (nf, kv_full, _), (nw, kv_win, pairs) = attention_groups(arch, full, seqs, chunk, c, pre)
    assert nf == nw == 12
    np.testing.assert_array_equal(kv_full, c)
    np.testing.assert_array_equal(kv_win, [128, 100, 128])
    np.testing.assert_array_equal(pairs, [127 + 3 * 128, 97 + 98 + 99 + 100, 128])


def test_sliding_window_attention_at_long_context_closed_form():
    """Decode at 65,536 tokens of context: the 18 full layers read all of it, the 18 window
    layers 128 tokens, so attention is 18 x (full) + 18 x (window) and the KV cache holds the
    full layers' tokens only."""
    arch = zoo.load_arch("gpt-oss-120b")
    cal = gpu_fit.calibration(GPUS["b200"])
    par = Parallel(dtype="fp4")
    r, c = np.array([8.0]), np.array([65536.0])
    parts = step_parts(arch, par, GPUS["b200"], cal.kernels, cal.allreduce, r, r, c, [False])
    full = attention_time(arch, par, GPUS["b200"], cal.kernels, r * c, r * c)
    window = attention_time(arch, par, GPUS["b200"], cal.kernels, r * 128, r * 128)
    assert parts["attention"] == pytest.approx(18 * full + 18 * window)
    assert parts["attention"] < 0.6 * 36 * full  # about half of pricing every layer in full
    _, meta = roofline_profile("b200", "gpt-oss-120b", contexts=[1024], dtype="fp4")
    assert meta["kv_bytes_per_token_per_gpu"] == 18 * kv_bytes_per_token_layer(arch, 1, 2)
    assert "128-token sliding window" in meta["attention"]["windows"]


def test_help_lists_every_gpu(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "profile", "--help")
    assert code == 0
    text = " ".join(out.split())
    for gpu in GPUS:
        assert gpu in text
