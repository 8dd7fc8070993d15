"""`dsim profile --roofline GPU --draft-model D`: a drafter pass priced from the target's layer
terms (closed forms), written as a profile `dsim run --draft-cost FILE` reads, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli

from dsim.engine.config import parse_draft_cost
from dsim.hardware import gpu_fit, moe, zoo
from dsim.hardware.arch import ACT_BYTES, Parallel
from dsim.hardware.draft_pass import (
    DRAFT_MODELS,
    DRAFT_VOCAB,
    drafter_terms,
    get_draft_model,
    pass_parts,
)
from dsim.hardware.draft_roofline import drafter_profile
from dsim.hardware.engines import get_engine
from dsim.hardware.gpu_model import elementwise_time, get_gpu, linear_time, step_parts
from dsim.hardware.latency import LatencyModel
from dsim.hardware.pricing import pricing

GPU = get_gpu("h200")
CAL = gpu_fit.calibration(GPU)
N = np.array([1.0, 8.0, 64.0, 512.0])  # tokens of the pass
R = np.array([1.0, 8.0, 16.0, 128.0])  # its sequences (q = 1, 1, 4, 4)
C = np.array([512.0, 2048.0, 4096.0, 1024.0])


def target_parts(model: str, par: Parallel) -> dict[str, np.ndarray]:
    arch = zoo.load_arch(model)
    return step_parts(
        arch, par, GPU, CAL.kernels, CAL.allreduce, N, R, C, np.zeros(N.shape, bool)
    )  # fmt: skip


def price(arch, par: Parallel):
    """The target's setup on the H200 with NCCL all-reduces and no graphs (as `target_parts`)."""
    return pricing(arch, "h200", par, False, None)


def fc(inputs: int, hidden: int, tp: int) -> np.ndarray:
    """The input projection's closed form: inputs*H -> H over N tokens, TP-sharded."""
    params = inputs * hidden * hidden / tp
    nbytes = params * 2 + N * (inputs * hidden + hidden / tp) * ACT_BYTES
    return linear_time(CAL.kernels, GPU, 2 * N * params, nbytes, GPU.flops)


@pytest.mark.parametrize("tp", [1, 2])
def test_mtp_is_one_target_layer_plus_the_shared_head_and_its_projection(tp):
    par = Parallel(tp=tp)
    arch = zoo.load_arch("qwen3-8b")
    target = target_parts("qwen3-8b", par)
    mtp = pass_parts(get_draft_model("mtp"), price(arch, par), N, R, C)
    for part in ("linear", "elementwise", "attention", "allreduce"):
        np.testing.assert_allclose(mtp[part], target[part] / arch.layers, rtol=1e-12)
    np.testing.assert_allclose(mtp["lm_head"], target["lm_head"], rtol=1e-12)  # shared head
    np.testing.assert_allclose(mtp["input_proj"], fc(2, arch.hidden, tp), rtol=1e-12)
    norm = elementwise_time(CAL.kernels, GPU, 2 * N * arch.hidden * ACT_BYTES)
    np.testing.assert_allclose(mtp["input_norms"], 2 * norm, rtol=1e-12)
    assert not mtp["sequential_head"].any() and not mtp["qkv_extra"].any()


def test_mtp_on_an_moe_target_is_one_moe_layer_and_pays_its_engine_term():
    arch = zoo.load_arch("qwen3-30b-a3b")
    target = target_parts("qwen3-30b-a3b", Parallel())
    mtp = pass_parts(get_draft_model("mtp"), price(arch, Parallel()), N, R, C)
    np.testing.assert_allclose(mtp["linear"], target["linear"] / arch.layers, rtol=1e-12)
    for part in moe.PARTS:
        np.testing.assert_allclose(mtp[part], target[part] / arch.layers, rtol=1e-12)
    engine = get_engine("vllm-0.8")
    terms = drafter_terms(engine.terms, 1.0)
    assert terms.per_seq_s == terms.per_step_s == terms.per_token_s == 0.0
    assert terms.overlap_step_s == terms.overlap_seq_s == 0.0
    assert terms.moe_gemm_scale == engine.terms.moe_gemm_scale < 1  # the engine's GEMMs
    df, meta = drafter_profile("h200", "qwen3-30b-a3b", "mtp", contexts=(2048,), engine="vllm-0.8")
    row = df[(df["batch_tokens"] == 256) & (df["num_seqs"] == 256)].iloc[0]
    kernels = pricing(arch, "h200", Parallel(), False, None, "vllm-0.8")  # the profile's
    at = (get_draft_model("mtp"), kernels, 256.0, 256.0, 2048.0)
    parts = pass_parts(*at, terms.moe_gemm_scale)
    assert parts["moe_gemm"] > pass_parts(*at)["moe_gemm"]  # slower than the prior's kernels
    work_ms = sum(float(v) for v in parts.values()) * 1e3 + terms.per_layer_s * 1e3
    floor_ms = engine.spec_round.host_pass_s * 1e3  # the host time per proposer step
    assert row["latency_ms"] == pytest.approx(max(work_ms, floor_ms), rel=1e-5)
    small = df[(df["batch_tokens"] == 1) & (df["num_seqs"] == 1)].iloc[0]
    assert small["latency_ms"] >= floor_ms * (1 - 1e-9)
    assert meta["drafter_kind"] == "ar"


def test_eagle_layers_are_the_targets_and_eagle3_heads_a_32k_vocabulary():
    arch = zoo.load_arch("qwen3-8b")
    par = Parallel()
    target = target_parts("qwen3-8b", par)
    eagle = pass_parts(get_draft_model("eagle"), price(arch, par), N, R, C)
    eagle3 = pass_parts(get_draft_model("eagle3"), price(arch, par), N, R, C)
    for p in (eagle, eagle3):
        np.testing.assert_allclose(p["linear"], target["linear"] / arch.layers, rtol=1e-12)
        np.testing.assert_allclose(p["attention"], target["attention"] / arch.layers, rtol=1e-12)
    np.testing.assert_allclose(eagle["lm_head"], target["lm_head"], rtol=1e-12)
    np.testing.assert_allclose(eagle["input_proj"], fc(2, arch.hidden, 1), rtol=1e-12)
    np.testing.assert_allclose(eagle3["input_proj"], fc(3, arch.hidden, 1), rtol=1e-12)
    head = DRAFT_VOCAB * arch.hidden
    nbytes = head * ACT_BYTES + N * (arch.hidden + DRAFT_VOCAB) * ACT_BYTES
    want = linear_time(CAL.kernels, GPU, 2 * N * head, nbytes, GPU.flops)
    np.testing.assert_allclose(eagle3["lm_head"], want, rtol=1e-12)
    qkv = arch.hidden * (arch.heads + 2 * arch.kv_heads) * arch.head_dim
    width = (arch.heads + 2 * arch.kv_heads) * arch.head_dim
    want = linear_time(
        CAL.kernels, GPU, 2 * N * qkv, qkv * 2 + N * (arch.hidden + width) * 2, GPU.flops
    )
    np.testing.assert_allclose(eagle3["qkv_extra"], want, rtol=1e-12)


def test_dspark_backbone_is_two_target_layers_and_its_head_is_sequential_in_gamma():
    arch = zoo.load_arch("qwen3-8b")
    target = target_parts("qwen3-8b", Parallel())
    dspark = get_draft_model("dspark")
    p = pass_parts(dspark, price(arch, Parallel()), N, R, C)
    np.testing.assert_allclose(p["linear"], 2 * target["linear"] / arch.layers, rtol=1e-12)
    np.testing.assert_allclose(p["attention"], 2 * target["attention"] / arch.layers, rtol=1e-12)
    r = np.full(8, 32.0)
    gamma = np.arange(1.0, 9.0)
    head = pass_parts(dspark, price(arch, Parallel()), r * gamma, r, np.full(8, 2048.0))
    np.testing.assert_allclose(
        head["sequential_head"], gamma * head["sequential_head"][0], rtol=1e-12
    )  # one step per block position at the same R: linear in gamma
    _, meta = drafter_profile("h200", "qwen3-8b", "dspark", contexts=(2048,))
    assert meta["drafter_kind"] == "block"
    assert 0 < meta["sequential_head_check"]["share_of_round"] < 0.05


@pytest.mark.parametrize(
    ("draft", "kind"), [("eagle", "ar"), ("eagle3", "ar"), ("dspark", "block")]
)
def test_cli_writes_a_drafter_profile_that_run_reads(monkeypatch, capsys, tmp_path, draft, kind):
    out = tmp_path / f"{draft}.csv"
    args = ["profile", "--roofline", "h200", "--model", "qwen3-8b", "--draft-model", draft]
    code, stdout, err = run_cli(
        monkeypatch, capsys, *args, "--engine", "gpu-only", "--contexts", "1024,4096",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert f"--drafter-kind {kind}" in stdout
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["drafter_kind"] == kind and meta["engine"]["name"] == "gpu-only"
    cost = parse_draft_cost(str(out), kind)
    profile = LatencyModel.from_csv(out)
    gamma = 7
    for r, c in ((1, 1024), (16, 4096)):
        if kind == "ar":  # the first pass over every verify position, then one token each
            want = profile.latency(r * (1 + gamma), r, c) + (gamma - 1) * profile.latency(r, r, c)
        else:
            want = profile.latency(r * gamma, r, c)
        assert cost.seconds(r, gamma, c, profile) == pytest.approx(want, rel=1e-12)
    run_dir = tmp_path / "run"
    code, _, err = run_cli(
        monkeypatch, capsys, "run", "--trace", "synthetic:n=20", "--profile",
        "profiles/h200-qwen3-8b-gpuonly-roofline.csv", "--draft-cost", str(out),
        "--drafter-kind", kind, "--policy", "fixed:3", "--out", str(run_dir), "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["drafter_kind"] == kind and summary["spec"]["draft_cost"] == str(out)


def test_drafter_costs_follow_the_chosen_engine():
    """A pass under current vLLM: max(the GPU-only pass, host per step); its MoE kernels are
    the prior's (scale 1) and it has no per-layer host term, so its work is GPU-only's. Over an
    MoE MTP layer and gpt-oss-20b's EAGLE-3 drafter on a B200 the floor binds somewhere and not
    everywhere."""
    engine = get_engine("vllm")
    assert engine.terms.moe_gemm_scale == 1.0 and engine.terms.per_layer_s == 0.0
    floor_ms = engine.spec_round.host_pass_s * 1e3
    works = []
    for gpu, model, draft in (("h200", "qwen3-30b-a3b", "mtp"), ("b200", "gpt-oss-20b", "eagle3")):
        base, _ = drafter_profile(gpu, model, draft, contexts=(1024,), engine="gpu-only")
        vllm, _ = drafter_profile(gpu, model, draft, contexts=(1024,), engine="vllm")
        work = base["latency_ms"].to_numpy()
        np.testing.assert_allclose(vllm["latency_ms"].to_numpy(), np.maximum(work, floor_ms))
        works.append(work)
    assert (np.concatenate(works) < floor_ms).any()  # the floor binds somewhere
    assert (np.concatenate(works) > floor_ms).any()  # and not everywhere


@pytest.mark.parametrize("model", ["gpt-oss-20b", "qwen3-8b"])
def test_drafter_passes_grow_with_the_batch(model):
    """More sequences at the same tokens each never make a pass cheaper, and no pass is free:
    a drafter of a sliding-window target attends to the whole context (its one layer cannot
    carry the target's count of windowed layers; once it did, and priced negative attention)."""
    prof, _ = drafter_profile("b200", model, "eagle3", contexts=(1024, 8192), engine="gpu-only")
    assert (prof["latency_ms"] > 0).all()
    prof = prof.assign(per_seq=prof["batch_tokens"] // prof["num_seqs"])
    for _, group in prof.groupby(["context_len", "per_seq"]):
        ordered = group.sort_values("num_seqs")["latency_ms"].to_numpy()
        assert (np.diff(ordered) >= -1e-12).all()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--roofline", "h200", "--draft-model", "medusa"], "unknown 'medusa'; known: "),
        (["--draft-model", "eagle"], "--draft-model goes with --roofline GPU"),
        (["--roofline", "h200", "--drafter"], "with --draft-model eagle|eagle3|mtp|dspark"),
    ],
)
def test_bad_draft_model_exits_2_in_one_line(monkeypatch, capsys, tmp_path, args, message):
    out = tmp_path / "d.csv"
    base = ["profile", "--model", "qwen3-8b", "--out", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *base, *args)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    if "medusa" in message:
        assert all(name in err for name in DRAFT_MODELS)
    assert not out.exists() and not out.with_suffix(".json").exists()
