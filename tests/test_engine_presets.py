"""Engine presets: the step terms added to the GPU work, their fit on published runs, the CLI."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from conftest import ROOT, run_cli

from dsim.hardware import engine_fit, zoo
from dsim.hardware.engines import DEFAULT_ENGINE, ENGINES, get_engine
from dsim.hardware.gpu_model import StepOverhead
from dsim.hardware.latency import LatencyModel, read_profile
from dsim.hardware.roofline import roofline_profile
from dsim.run import RunSpec, simulate

CTX = [2048]


def latency(engine: str, scale: float = 1.0, model: str = "qwen3-8b") -> np.ndarray:
    df, _ = roofline_profile("h200", model, CTX, overhead_scale=scale, engine=engine)
    return df["latency_ms"].to_numpy()


def test_terms_price_the_closed_form():
    terms = StepOverhead(2e-4, 3e-5, per_step_s=1e-3, per_moe_layer_s=5e-4, per_token_s=7e-6)
    arch = zoo.load_arch("deepseek-v3")  # 61 layers, 58 of them MoE
    got = terms.seconds(arch, np.array([4.0, 16.0]), np.array([8.0, 16.0]))
    fixed = 1e-3 + 61 * 2e-4 + 58 * 5e-4
    np.testing.assert_allclose(got, [fixed + 4 * 3e-5 + 8 * 7e-6, fixed + 16 * 3e-5 + 16 * 7e-6])
    assert terms.scaled(0.5).per_moe_layer_s == pytest.approx(2.5e-4)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "vllm-2023"])
def test_overhead_scale_scales_the_chosen_presets_terms(engine):
    """latency(k) = GPU work + k x terms: latency(2) - latency(0) = 2 (latency(1) - latency(0))."""
    zero, one, two = (latency(engine, k) for k in (0.0, 1.0, 2.0))
    np.testing.assert_allclose(two - zero, 2 * (one - zero), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(zero, latency("gpu-only"), rtol=0, atol=0)
    assert (one >= zero).all()


def test_vllm_2023_reproduces_the_shipped_2023_file():
    df, _ = roofline_profile("h200", "qwen3-8b", engine="vllm-2023")
    shipped = read_profile(ROOT / "profiles/h200-qwen3-8b-vllm2023-roofline.csv")
    np.testing.assert_allclose(df["latency_ms"], shipped["latency_ms"], rtol=1e-5, atol=1e-4)


def test_every_fitted_term_is_non_negative_and_the_fit_is_deterministic():
    first = engine_fit.fit_presets(engine_fit.fit_rows())
    for name in ENGINES:
        terms = get_engine(name).terms
        assert min(terms.__dict__.values()) >= 0, name
    assert engine_fit.fit_presets(engine_fit.fit_rows().copy()) == first


def test_the_fit_recovers_terms_that_made_the_gaps():
    """Rows whose measured step is GPU work + known terms give back those terms (exact data)."""
    rows = engine_fit.fit_rows().copy()
    # dense per-step cost alike in SGLang and NIM, so vLLM's prior (their pooled fit) is exact
    true = {
        "vllm": StepOverhead(0.0, 4e-5, per_step_s=1e-3, per_moe_layer_s=3e-4),
        "sglang": StepOverhead(0.0, 1e-5, per_step_s=1e-3, per_moe_layer_s=2e-4),
        "trtllm": StepOverhead(0.0, 1e-5, per_step_s=1e-3, per_moe_layer_s=2e-4),
    }
    for name, terms in true.items():
        sel = rows["preset"] == name
        rows.loc[sel, "measured_s"] = engine_fit.predict(rows[sel], terms)
    got = engine_fit.fit_presets(rows)
    for name, terms in true.items():
        for field in ("per_step_s", "per_moe_layer_s", "per_seq_s"):
            assert getattr(got[name], field) == pytest.approx(getattr(terms, field), abs=1e-9)


def test_the_long_input_rule_leaves_out_exactly_the_30000_token_rows():
    raw = engine_fit.raw_rows()
    plain_a = raw[(raw["kind"] == "A") & raw["input_len"].notna() & raw["num_prompts"].notna()]
    deepseek = plain_a[plain_a["model"].str.contains("DeepSeek")]
    for i, row in deepseek.iterrows():
        admitted = i in engine_fit.ROWS
        assert admitted == (engine_fit.prefill_share(row) <= 0.5), i
    out = [i for i in deepseek.index if i not in engine_fit.ROWS]
    assert sorted(raw.loc[out, "input_len"].unique()) == [30000]
    assert not any(raw.loc[list(engine_fit.ROWS), "kind"] == "B")  # no speculative row


def test_the_data_holds_no_held_out_run():
    raw = engine_fit.raw_rows()
    assert not raw["model"].str.contains("3.1-8B", case=False).any()
    assert not raw["source_url"].str.contains("perf-overview|perf_overview").any()


def test_little_law_batch_matches_the_measured_concurrency_of_the_1000_token_rows():
    rows = engine_fit.fit_rows().set_index("row")
    # the logs' measured mean concurrency: 48.51 (vLLM, 50 prompts), 48.35 (SGLang, 50)
    assert rows.loc[0, "seqs"] == pytest.approx(48.51, rel=0.02)
    assert rows.loc[4, "seqs"] == pytest.approx(48.35, rel=0.02)
    assert rows.loc[11, "prefill_s"] == pytest.approx(0.0, abs=1e-4)  # c = 1: no other prompt


def test_leave_one_source_out_covers_the_folds_and_says_how_each_was_predicted():
    result = engine_fit.loso()
    assert list(result["folds"]) == list(engine_fit.FOLDS)
    assert result["folds"]["LMSYS blog"]["n"] == 0
    assert "shared" in result["folds"]["NIM"]["predicted_from"]
    assert "own refit" in result["folds"]["vLLM 50"]["predicted_from"]
    assert sum(f["n"] for f in result["folds"].values()) == len(engine_fit.ROWS)
    for setup in result["setups"].values():
        assert setup["gpu_only"]["n"] == setup["n"]


def test_cli_default_engine_is_said_and_recorded(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p.csv"
    code, stdout, _ = run_cli(
        monkeypatch, capsys, "profile", "--roofline", "h200", "--model", "qwen3-8b",
        "--contexts", "2048", "--out", str(out),
    )  # fmt: skip
    assert code == 0 and f"engine {DEFAULT_ENGINE} (the default)" in stdout
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["engine"]["name"] == "vllm" and "0.8.4" in meta["engine"]["fitted_on"]
    assert meta["engine"]["terms_s"] == meta["engine"]["fitted_terms_s"]
    assert "engine vllm;" in LatencyModel.from_csv(out).describe()


def test_cli_named_engine_and_scale_are_recorded(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p.csv"
    code, stdout, _ = run_cli(
        monkeypatch, capsys, "profile", "--roofline", "h200", "--model", "qwen3-8b",
        "--contexts", "2048", "--engine", "sglang", "--overhead-scale", "0.5", "--out", str(out),
    )  # fmt: skip
    meta = json.loads(out.with_suffix(".json").read_text())
    assert code == 0 and "(the default)" not in stdout
    terms, fitted = meta["engine"]["terms_s"], meta["engine"]["fitted_terms_s"]
    assert terms["per_seq_s"] == pytest.approx(0.5 * fitted["per_seq_s"])
    assert "engine sglang x 0.5;" in LatencyModel.from_csv(out).describe()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "tgi"], "unknown engine 'tgi'; known: " + ", ".join(ENGINES)),
        (["--overhead-scale", "nan"], "expected a finite number"),
        (["--overhead-scale", "-1"], "--overhead-scale must be a finite number >= 0 and <= 100"),
    ],
)
def test_bad_engine_input_is_one_line_and_writes_nothing(
    monkeypatch, capsys, tmp_path, args, message
):
    out = tmp_path / "p.csv"
    code, _, err = run_cli(
        monkeypatch, capsys, "profile", "--roofline", "h200", "--model", "qwen3-8b", *args,
        "--out", str(out),
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and message in err
    assert list(tmp_path.iterdir()) == []


def test_engine_without_roofline_is_refused(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p.csv"
    code, _, err = run_cli(monkeypatch, capsys, "profile", "--engine", "vllm", "--out", str(out))
    assert code == 2 and "--engine goes with --roofline" in err and not out.exists()


def test_shipped_profiles_name_their_engine():
    expect = {
        "h200-qwen3-8b-roofline": "vllm",
        "h200-qwen3-8b-vllm2023-roofline": "vllm-2023",
        "h200-qwen3-8b-gpuonly-roofline": "gpu-only",
        "h200x8-deepseek-v3-fp8-vllm2023-roofline": "vllm-2023",
        "h200-qwen3-8b": "measured",
    }
    for name, engine in expect.items():
        line = LatencyModel.from_csv(ROOT / "profiles" / f"{name}.csv").describe()
        assert f"engine {engine};" in line, line


def test_no_tracked_file_points_outside_the_repository():
    shared = "sha" + "red"  # spelled in two parts so this file does not match itself
    files = subprocess.run(
        ["git", "grep", "-l", "-e", f"/work/{shared}", "-e", f"../{shared}"],
        cwd=ROOT, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    assert files == []


def test_default_engine_is_faster_than_the_2023_engine_and_slower_than_gpu_work():
    new, old, gpu = latency("vllm"), latency("vllm-2023"), latency("gpu-only")
    assert (gpu <= new).all() and (new < old).all()


# -- memory: weights and KV per GPU, the KV dtype, models that do not fit ----------------------


def test_sidecar_memory_is_the_closed_form_and_fp8_kv_halves_it():
    _, bf16 = roofline_profile("h200", "qwen3-8b", CTX)
    _, fp8 = roofline_profile("h200", "qwen3-8b", CTX, kv_dtype="fp8")
    arch = zoo.load_arch("qwen3-8b")
    weights = arch.param_counts()[0] * 2
    kv = 36 * 2 * 8 * 128 * 2  # layers x (K, V) x KV heads x head_dim x bf16 bytes
    mem = bf16["memory"]
    assert mem["weight_bytes_per_gpu"] == weights and mem["kv_bytes_per_token_per_gpu"] == kv
    assert mem["kv_capacity_tokens"] == int((0.9 * 141e9 - weights) // kv)
    assert fp8["memory"]["kv_bytes_per_token_per_gpu"] == kv // 2
    assert fp8["memory"]["kv_capacity_tokens"] == int((0.9 * 141e9 - weights) // (kv // 2))
    assert fp8["memory"]["kv_dtype"] == "fp8"


def test_fp8_kv_reads_less_in_attention_and_nothing_else_changes():
    _, bf16 = roofline_profile("h200", "qwen3-8b", CTX, engine="gpu-only")
    _, fp8 = roofline_profile("h200", "qwen3-8b", CTX, engine="gpu-only", kv_dtype="fp8")
    for point, parts in bf16["breakdown_ms"].items():
        assert fp8["breakdown_ms"][point]["attention"] < parts["attention"], point
        assert fp8["breakdown_ms"][point]["linear"] == parts["linear"]


def test_zoo_llama_3_parameter_counts_match_published():
    assert zoo.load_arch("llama3.1-8b").param_counts()[0] == pytest.approx(8.03e9, rel=0.005)
    assert zoo.load_arch("llama3.3-70b").param_counts()[0] == pytest.approx(70.6e9, rel=0.005)
    assert zoo.load_arch("llama3.3-70b").vocab == 128256


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "llama3.3-70b", "--roofline", "h100"], "llama3.3-70b's weights need 141.1 GB"),
        (["--model", "qwen3-8b", "--roofline", "h200", "--kv-dtype", "int4"], "--kv-dtype must be"),
    ],
)
def test_a_model_that_does_not_fit_or_a_bad_kv_dtype_is_refused(
    monkeypatch, capsys, tmp_path, args, message
):
    out = tmp_path / "p.csv"
    code, _, err = run_cli(monkeypatch, capsys, "profile", *args, "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_same_model_fits_on_more_gpus():
    _, meta = roofline_profile("h100", "llama3.3-70b", CTX, tp=4, dtype="fp8", kv_dtype="fp8")
    assert meta["memory"]["kv_capacity_tokens"] > 100_000


def test_profile_show_names_the_engine(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p.csv"
    args = ["profile", "--roofline", "h200", "--model", "qwen3-8b", "--contexts", "2048"]
    code, _, _ = run_cli(monkeypatch, capsys, *args, "--engine", "trtllm", "--out", str(out))
    assert code == 0
    code, stdout, _ = run_cli(monkeypatch, capsys, "profile", "show", str(out))
    assert code == 0 and "engine trtllm;" in stdout


def test_run_summary_counts_gpus_from_the_profile(tmp_path, monkeypatch, capsys):
    out = tmp_path / "ds.csv"
    args = ["profile", "--roofline", "h200", "--model", "deepseek-v3", "--tp", "8", "--ep", "8"]
    code, _, _ = run_cli(monkeypatch, capsys, *args, "--dtype", "fp8", "--contexts", "2048",
                         "--out", str(out))  # fmt: skip
    assert code == 0
    res = simulate(RunSpec(trace="synthetic:n=6", profile=str(out), policy="mtp1", replicas=2))
    s = res.summary
    assert s["gpus_per_replica"] == 8 and s["gpus_total"] == 16
    assert s["throughput_tok_s_per_gpu"] == pytest.approx(s["throughput_tok_s"] / 16)
    measured = simulate(
        RunSpec(trace="synthetic:n=4", profile=str(ROOT / "profiles/cpu-smollm2-135m.csv"))
    )
    assert measured.summary["gpus_total"] is None
