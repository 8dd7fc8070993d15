"""Engine presets: the step terms added to the GPU work, their fit on published runs, the CLI."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, run_cli

from dsim.hardware import engine_fit, moe, zoo
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
    terms = StepOverhead(2e-4, 3e-5, per_step_s=1e-3, moe_gemm_scale=0.8, per_token_s=7e-6,
                         overlap_step_s=4e-3, overlap_seq_s=2e-5)  # fmt: skip
    arch = zoo.load_arch("deepseek-v3")  # 61 layers, 58 of them MoE
    got = terms.seconds(arch, np.array([4.0, 16.0]), np.array([8.0, 16.0]))
    fixed = 1e-3 + 61 * 2e-4
    np.testing.assert_allclose(got, [fixed + 4 * 3e-5 + 8 * 7e-6, fixed + 16 * 3e-5 + 16 * 7e-6])
    np.testing.assert_allclose(terms.overlapped(np.array([4.0])), [4e-3 + 4 * 2e-5])
    half = terms.scaled(0.5)
    assert half.moe_gemm_scale == 0.8  # GPU work: not an engine overhead to scale
    assert half.overlap_step_s == pytest.approx(2e-3) and half.per_seq_s == pytest.approx(1.5e-5)


@pytest.mark.parametrize("engine", ["vllm-0.8", "sglang", "trtllm", "vllm-2023"])
def test_overhead_scale_scales_the_serialised_terms(engine):
    """An engine that serialises its host work: latency(k) = GPU work + k x terms, so
    latency(2) - latency(0) = 2 (latency(1) - latency(0))."""
    zero, one, two = (latency(engine, k) for k in (0.0, 1.0, 2.0))
    np.testing.assert_allclose(two - zero, 2 * (one - zero), rtol=1e-9, atol=1e-9)
    assert (one >= zero).all()


def test_overlapped_host_time_hides_under_the_gpu_work_until_it_outlasts_it():
    """Current vLLM overlaps its host work: latency(k) = max(GPU, k x overlapped) (+ launches)."""
    zero, one, big = (latency("vllm", k) for k in (0.0, 1.0, 50.0))
    assert (one >= zero).all() and (big >= one).all()
    df, meta = roofline_profile("h200", "qwen3-8b", CTX, engine="vllm")
    host = meta["engine"]["terms_s"]
    assert host["per_step_s"] == 0 and host["overlap_step_s"] > 0
    hidden = zero > 1e3 * (host["overlap_step_s"] + host["overlap_seq_s"] * df["num_seqs"])
    assert hidden.any() and np.array_equal(one[hidden.to_numpy()], zero[hidden.to_numpy()])


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
    """Rows whose measured step is GPU work + known terms give back those terms (exact data):
    host time per engine on its dense rows, its grouped-GEMM scale on its MoE rows; the dense
    host time alike in SGLang and NIM, so vLLM's (their pooled fit) is exact too. Versions
    without MoE rows keep the prior (scale 1); a scale beyond its range comes back at the
    bound."""
    rows = engine_fit.fit_rows().copy()
    host = dict(per_step_s=1.5e-3)
    true = {
        "vllm-0.8": StepOverhead(0.0, 2e-5, moe_gemm_scale=0.7, **host),
        "sglang": StepOverhead(0.0, 2e-5, moe_gemm_scale=0.9, **host),
        "trtllm": StepOverhead(0.0, 2e-5, **host),
    }
    rows["measured_s"] = engine_fit.predict(rows, true)
    got = engine_fit.fit_presets(rows)
    for name in ("vllm-0.8", "sglang"):
        for field in ("per_step_s", "moe_gemm_scale", "per_seq_s"):
            assert getattr(got[name], field) == pytest.approx(getattr(true[name], field), abs=1e-9)
    assert got["trtllm"].per_step_s == pytest.approx(1.5e-3, abs=1e-9)
    assert got["trtllm"].moe_gemm_scale == got["vllm"].moe_gemm_scale == 1.0
    assert got["vllm"].overlap_step_s == got["vllm-0.8"].per_step_s and got["vllm"].per_step_s == 0
    true["sglang"] = StepOverhead(0.0, 2e-5, moe_gemm_scale=0.4, **host)  # below the range
    rows["measured_s"] = engine_fit.predict(rows, true)
    assert engine_fit.fit_presets(rows)["sglang"].moe_gemm_scale == moe.SCALE_RANGE[0]


# The long-input rule's budgets (docs/engine-fit-rules.md): vLLM 0.8.4's API-server
# max_num_batched_tokens on H100/H200, SGLang's chunked_prefill_size in the fitted runs' log.
RULE_BUDGET = {"vLLM": 8192, "SGLang": 8192}


def prefill_share(row: pd.Series) -> float:
    """The long-input rule: share of token gaps that can follow a step carrying prefill."""
    steps = row["num_prompts"] * row["input_len"] / RULE_BUDGET[row["engine"]]
    return float(steps / (steps + row["output_len"]))


def test_the_long_input_rule_leaves_out_exactly_the_30000_token_rows():
    raw = engine_fit.raw_rows()
    plain_a = raw[(raw["kind"] == "A") & raw["input_len"].notna() & raw["num_prompts"].notna()]
    deepseek = plain_a[plain_a["model"].str.contains("DeepSeek")]
    for i, row in deepseek.iterrows():
        admitted = i in engine_fit.P_ROWS
        assert admitted == (prefill_share(row) <= 0.5), i
    out = [i for i in deepseek.index if i not in engine_fit.P_ROWS]
    assert sorted(raw.loc[out, "input_len"].unique()) == [30000]
    assert not any(raw.loc[list(engine_fit.P_ROWS), "kind"] == "B")  # no speculative row


def test_the_data_holds_no_held_out_run():
    raw = engine_fit.raw_rows()
    assert not raw["model"].str.contains("3.1-8B", case=False).any()
    assert not raw["source_url"].str.contains("perf-overview|perf_overview").any()
    for row in engine_fit.eval_rows():
        url = row["source_url"]
        assert "perf-overview" not in url and "perf_overview" not in url
        assert "/pull/16937" not in url and "/issues/20780" not in url


def test_little_law_batch_matches_the_measured_concurrency_of_the_1000_token_rows():
    rows = engine_fit.fit_rows().set_index("row")
    # the logs' measured mean concurrency: 48.51 (vLLM, 50 prompts), 48.35 (SGLang, 50)
    assert rows.loc["P0", "seqs"] == pytest.approx(48.51, rel=0.02)
    assert rows.loc["P4", "seqs"] == pytest.approx(48.35, rel=0.02)
    assert rows.loc["P11", "prefill_s"] == pytest.approx(0.0, abs=1e-4)  # c = 1: no other prompt


def test_leave_one_source_out_covers_the_folds_and_reports_the_gpu_residual():
    result = engine_fit.loso()
    rows = engine_fit.fit_rows()
    assert list(result["folds"]) == list(engine_fit.FOLDS)
    assert sum(f["n"] for f in result["folds"].values()) == int(rows["fitted"].sum())
    assert set(result["gpu_only_residual"]) == set(rows.loc[rows["fitted"], "setup"])
    excluded = {r["row"] for r in result["rows"] if not r["fitted"]}
    assert excluded == {"E0", "E133", "E134", "E143", "E144", "E145"}  # E143-E145: B200, evaluation


def test_cli_default_engine_is_said_and_recorded(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p.csv"
    code, stdout, _ = run_cli(
        monkeypatch, capsys, "profile", "--roofline", "h200", "--model", "qwen3-8b",
        "--contexts", "2048", "--out", str(out),
    )  # fmt: skip
    assert code == 0 and f"engine {DEFAULT_ENGINE} (the default)" in stdout
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["engine"]["name"] == "vllm" and "0.8.4" in meta["engine"]["fitted_on"]
    assert meta["engine"]["graphs"]["sizes"][-1] == 512
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
    assert terms["per_seq_s"] == pytest.approx(0.5 * fitted["per_seq_s"]) and fitted["per_seq_s"]
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
    h200 = 143771 * 2**20  # bytes, as nvidia-smi reports them
    assert mem["kv_capacity_tokens"] == int((0.9 * h200 - weights) // kv)
    assert fp8["memory"]["kv_bytes_per_token_per_gpu"] == kv // 2
    assert fp8["memory"]["kv_capacity_tokens"] == int((0.9 * h200 - weights) // (kv // 2))
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
        (
            ["--model", "llama3.3-70b", "--roofline", "h100"],
            "llama3.3-70b's weights need 131.4 GiB",
        ),
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


def test_profile_show_prints_the_engines_step_and_round_parts_and_priors(
    monkeypatch, capsys, tmp_path
):
    """The step parts add up (max(GPU, overlapped host) + serialised = the step), the round's
    row is the verify step + K host floors + per round, and every prior names its range."""
    out = tmp_path / "p.csv"
    args = ["profile", "--roofline", "h200", "--model", "qwen3-8b", "--contexts", "2048"]
    assert run_cli(monkeypatch, capsys, *args, "--out", str(out))[0] == 0
    code, stdout, _ = run_cli(monkeypatch, capsys, "profile", "show", str(out), "--out",
                              str(tmp_path / "p.png"))  # fmt: skip
    assert code == 0
    assert "a step's parts (ms)" in stdout and "a round's engine parts (ms)" in stdout
    assert "priors (value, range, source)" in stdout and "(20-150)" in stdout
    # the elementwise and attention parts have columns, their priors and the MoE's a line each
    header = next(line for line in stdout.splitlines() if line.startswith("shape"))
    assert header.split()[:4] == ["shape", "linear", "elem", "attn"]
    text = " ".join(stdout.split())  # the console wraps long lines
    assert "elementwise kernels per layer: act x1, add+norm x2, rope x1" in text
    # how sure: the sidecar's bracket and the fits' held-out errors, as the sidecar has them
    meta = json.loads(out.with_suffix(".json").read_text())
    plain = meta["engine_fit"]["leave_one_source_out"]["all"]
    assert "(ESTIMATE: h200, qwen3-8b, bf16)" in text
    assert "GPU work: +-20% stated (a measured GPU's +-15%; borrows another GPU's fit" in text
    assert (f"each source held out: median {plain['median_abs_error']:.1%}, worst "
            f"{plain['max_abs_error']:.1%} over {plain['n']} published rows") in text  # fmt: skip
    assert "decode attention: FlashAttention" in text and "(range 0.45-0.83" in text
    assert "- MoE: grouped-GEMM bandwidth efficiency by expert slice width" in text
    assert "- MoE routing locality: a token shares 0.257 of its top-k experts" in text
    meta = json.loads(out.with_suffix(".json").read_text())
    for parts in meta["breakdown_ms"].values():
        gpu = sum(parts[k] for k in ("linear", "elementwise", "attention", "lm_head", "allreduce",
                                     "padding", *moe.PARTS))  # fmt: skip
        step = max(gpu, parts["host_overlapped"]) + parts["host_serialised"]
        assert step == pytest.approx(parts["step"], abs=2e-3)
    terms = meta["engine"]["spec_round"]["terms_s"]
    model = LatencyModel.from_csv(out)
    verify = float(model.latency(4, 1, 2048))
    want = (verify + 3 * terms["host_pass_s"] + terms["per_round_s"]) * 1e3
    row = next(line for line in stdout.splitlines() if line.startswith("1, 3"))
    assert float(row.split()[-1]) == pytest.approx(want, rel=1e-3)


def test_profile_show_of_a_measured_profile_has_no_engine_parts(monkeypatch, capsys, tmp_path):
    code, stdout, _ = run_cli(monkeypatch, capsys, "profile", "show",
                              str(ROOT / "profiles/cpu-smollm2-135m.csv"), "--out",
                              str(tmp_path / "m.png"))  # fmt: skip
    assert code == 0 and "a step's parts" not in stdout and "priors" not in stdout
