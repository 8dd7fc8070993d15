"""Limits from physics (docs/design.md, Input limits) and inputs that once ended in a traceback:
each refused with one line naming the input and the fix (exit 2, nothing written), or run with a
stated warning where it is legal but suspicious."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, run_cli, write_flat_profile
from test_bad_input import rejected  # noqa: F401  (the bad-input contract fixture)

from dsim.hardware.zoo import ZOO
from dsim.run import simulate
from dsim.run_spec import RunSpec

PROFILE = ROOT / "profiles/h200-qwen3-8b-roofline.csv"


def refused(monkeypatch, capsys, tmp_path, *args: str) -> str:
    """Run `dsim ARGS` in an empty folder: exit 2, one line, nothing left there. The line."""
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.iterdir())
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert set(tmp_path.iterdir()) == before
    return err


# --- sidecars and configs of the wrong shape -----------------------------------------------


def _estimate_with(tmp_path, **changes) -> str:
    """A copy of the shipped estimate whose sidecar has `changes` (None deletes a key)."""
    csv = tmp_path / "est.csv"
    csv.write_bytes(PROFILE.read_bytes())
    meta = json.loads(PROFILE.with_suffix(".json").read_text())
    meta.update(changes)
    csv.with_suffix(".json").write_text(json.dumps(meta))
    return str(csv)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"engine": "vllm"}, "engine: expected an object, got str"),
        ({"memory": [1]}, "memory: expected an object, got list"),
        ({"parallel": 8}, "parallel: expected an object, got int"),
        ({"parallel": {"gpus": 0}}, "parallel.gpus must be an integer >= 1, got 0"),
        ({"parallel": {"gpus": "8"}}, "parallel.gpus must be an integer >= 1"),
    ],
)
def test_a_sidecar_section_of_the_wrong_shape_is_refused(
    rejected,  # noqa: F811
    tmp_path,
    change,
    message,
):
    profile = _estimate_with(tmp_path, **change)
    err = rejected("--profile", profile)
    assert f"{tmp_path / 'est.json'}: {message}" in err


def test_a_bad_sidecar_named_by_a_sweep_layout_is_refused_before_any_point(
    monkeypatch, capsys, tmp_path
):
    profile = _estimate_with(tmp_path, engine="vllm")
    config = tmp_path / "sweep.toml"
    config.write_text(
        'policies = ["mtp1"]\n[run]\ntrace = "synthetic:n=5"\n[load]\nrate_scale = [1]\n'
        f'[layout]\nprofile = ["{profile}"]\n[sla]\nanchors = [100]\n'
    )
    out = tmp_path / "out"
    err = refused(monkeypatch, capsys, tmp_path, "pareto", "--config", str(config), "--out", "out")
    assert "layout:" in err and "engine: expected an object" in err and not out.exists()


def test_a_model_config_that_is_not_utf8_is_refused(monkeypatch, capsys, tmp_path):
    config = tmp_path / "config.json"
    config.write_bytes(b'{"hidden_size": "\xff\xfe"}')
    args = ("profile", "--roofline", "h200", "--model", str(config), "--out", "x.csv")
    assert f"{config}: row 1: not UTF-8 text" in refused(monkeypatch, capsys, tmp_path, *args)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_experts": 8, "num_experts_per_tok": 16}, "num_experts_per_tok 16 exceeds the 8"),
        ({"first_k_dense_replace": 48}, "first_k_dense_replace must be in 0..47"),
        ({"first_k_dense_replace": "3"}, "first_k_dense_replace must be a non-negative integer"),
        ({"max_position_embeddings": -1}, "max_position_embeddings must be a positive integer"),
    ],
)
def test_a_moe_config_that_no_model_has_is_refused(monkeypatch, capsys, tmp_path, change, message):
    config = tmp_path / "moe.json"
    config.write_text(json.dumps({**ZOO["qwen3-30b-a3b"], **change}))
    args = ("profile", "--roofline", "h200", "--model", str(config), "--out", "x.csv")
    assert message in refused(monkeypatch, capsys, tmp_path, *args)


# --- contexts: within the model's positions and the replica's KV memory -------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["h200", "--model", "qwen3-8b", "--contexts", "1000000000000"],
            "--contexts 1000000000000 is beyond qwen3-8b's max_position_embeddings (40960): "
            "give contexts up to 40960",
        ),
        (
            ["h100", "--model", "llama3.3-70b", "--tp", "2", "--contexts", "512,65536"],
            "--contexts 65536 is beyond the KV tokens the replica's memory holds (39162): give "
            "contexts up to 39162",
        ),
        (
            ["h200", "--model", "qwen3-8b", "--draft-model", "eagle3", "--contexts", "512,50000"],
            "--contexts 50000 is beyond qwen3-8b's max_position_embeddings",
        ),
    ],
)
def test_contexts_beyond_the_model_or_its_memory_are_refused(
    monkeypatch, capsys, tmp_path, args, message
):
    err = refused(monkeypatch, capsys, tmp_path, "profile", "--roofline", *args, "--out", "x.csv")
    assert message in err


def test_the_default_grid_stops_at_the_model_maximum_position(monkeypatch, capsys, tmp_path):
    out = tmp_path / "l.csv"
    args = ("profile", "--roofline", "h200", "--model", "llama2-7b", "--out", str(out))
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert json.loads(out.with_suffix(".json").read_text())["grid"]["contexts"][-1] == 4096


# --- a run's physics ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--draft-cost", "ratio:1e308"],
            "--draft-cost 'ratio:1e308': ratio must be a finite number >= 0 and <= 100",
        ),
        (["--draft-cost", "ratio:100.5"], "<= 100, got 100.5"),
        (
            ["--acceptance", "positions:0.9,0.8[spread=1e308]"],
            "spread must be a finite number >= 0 and <= 20, got 1e+308",
        ),
        (["--acceptance", "preset:dspark:chat[spread_req=21]"], "spread_req must be a finite"),
        (
            ["--max-num-batched-tokens", "1", "--gamma", "7"],
            "--max-num-batched-tokens 1 is below 1 + gamma = 8, one request's verify pass: "
            "raise it or lower --gamma",
        ),
        (["--max-num-batched-tokens", "4", "--gamma", "4", "--policy", "ar"], "below 1 + gamma"),
        (["--sched-cost", "auto:1e308"], "auto:F (F in 0..100) or SECONDS in 0..1"),
        (["--sched-cost", "2"], "--sched-cost '2': expected auto"),
        (["--rate-scale", "1e-300"], "arrivals span 1.75758e+300 s, more than 366 days"),
        (["--qps", "5e-324"], "arrivals span beyond any float, more than 366 days: raise the rate"),
        (["--kv-link-gbps", "nan"], "--kv-link-gbps"),
        (["--kv-bytes-per-token", "inf"], "--kv-bytes-per-token"),
        (["--kv-link-gbps", "0"], "--kv-link-gbps must be a finite number > 0"),
        (["--kv-bytes-per-token", "1e300"], "--kv-bytes-per-token must be a finite number > 0"),
    ],
)
def test_physics_beyond_any_deployment_is_refused(rejected, args, message):  # noqa: F811
    assert message in rejected(*args)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("kv_link_gbps = nan", "run: --kv-link-gbps must be a finite number > 0, got nan"),
        ("kv_bytes_per_token = inf", "run: --kv-bytes-per-token must be a finite number > 0"),
        ('draft_cost = "ratio:1000"', "run.draft_cost: --draft-cost 'ratio:1000': ratio must"),
    ],
)
def test_a_sweep_refuses_them_without_disaggregation_too(
    monkeypatch, capsys, tmp_path, line, message
):
    config = tmp_path / "sweep.toml"
    config.write_text(
        f'policies = ["mtp1"]\n[run]\ntrace = "synthetic:n=5"\n{line}\n'
        "[load]\nrate_scale = [1]\n[sla]\nanchors = [100]\n"
    )
    err = refused(monkeypatch, capsys, tmp_path, "pareto", "--config", str(config), "--out", "o")
    assert f"{config}: {message}" in err


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        (
            ["--draft-cost", "ratio:5"],
            "--draft-cost ratio:5: a drafter pass costs 5x the target's step",
        ),
        (["--kv-link-gbps", "100"], "--kv-link-gbps and --kv-bytes-per-token have no effect"),
        (["--kv-bytes-per-token", "1000"], "--kv-link-gbps and --kv-bytes-per-token have no"),
        (
            ["--drafter-kind", "mtp1", "--policy", "fixed:7", "--gamma", "7"],
            "--drafter-kind mtp1 prices one pass of one token a round, but fixed:7 drafts up to "
            "--gamma 7",
        ),
    ],
)
def test_legal_but_suspicious_settings_run_with_a_warning(
    monkeypatch, capsys, tmp_path, args, warning
):
    out = tmp_path / "o"
    base = ("run", "--trace", "synthetic:n=5", "--out", str(out), "--no-progress")
    code, _, err = run_cli(monkeypatch, capsys, *base, *args)
    assert code == 0, err
    assert f"dsim: warning: {warning}" in err
    assert any(warning in w for w in json.loads((out / "summary.json").read_text())["warnings"])


def test_a_cheap_drafter_runs_without_a_warning(monkeypatch, capsys, tmp_path):
    args = ("run", "--trace", "synthetic:n=5", "--draft-cost", "ratio:1", "--out", "o")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, *args, "--no-progress")
    assert code == 0 and "warning" not in err, err


# --- a closed-loop client larger than the trace --------------------------------------------


def test_a_concurrency_beyond_the_requests_runs_as_one_equal_to_them(tmp_path):
    profile = str(write_flat_profile(tmp_path / "flat.csv", 10.0))
    runs = [
        simulate(RunSpec(trace=f"synthetic:n=6,concurrency={c}", profile=profile, draft_cost="0"))
        for c in (6, 10**12)
    ]
    same = [{k: v for k, v in r.summary.items() if k != "trace"} for r in runs]
    assert json.dumps(same[0]) == json.dumps(same[1])  # the trace line names the cap as given
    assert runs[0].requests.equals(runs[1].requests)


# --- the minor ones: wording, options given twice or ignored, notes --------------------------


def test_a_tensor_parallel_size_without_a_measured_all_reduce_names_the_gpu_asked(
    monkeypatch, capsys, tmp_path
):
    config = tmp_path / "h36.json"  # 36 heads: --tp 9 divides them
    fields = {**ZOO["qwen3-8b"], "num_attention_heads": 36, "num_key_value_heads": 36}
    config.write_text(json.dumps({**fields, "hidden_size": 4608}))
    args = ("profile", "--roofline", "h200", "--model", str(config), "--tp", "9", "--out", "x.csv")
    err = refused(monkeypatch, capsys, tmp_path, *args)
    assert "--tp 9: no measured all-reduce for 9 GPUs on h200 (it borrows h100's table)" in err
    assert "use --tp 1, 2, 4, 8" in err


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--max-seqs", "4", "--max-num-seqs", "8"], "--max-seqs and --max-num-seqs"),
        (["--num-speculative-tokens=3", "--gamma", "4"], "--gamma and --num-speculative-tokens"),
    ],
)
def test_an_option_given_under_two_names_is_refused(monkeypatch, capsys, tmp_path, args, names):
    base = ["run", "--trace", "synthetic:n=5", "--no-progress", "--out", "o"]
    err = refused(monkeypatch, capsys, tmp_path, *base, *args)
    assert f"{names} name the same setting: give one" in err


def test_the_same_name_twice_keeps_the_last_as_scripts_expect(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    args = ("run", "--trace", "synthetic:n=5", "--gamma", "3", "--gamma", "4", "--out", "o")
    code, _, err = run_cli(monkeypatch, capsys, *args, "--no-progress")
    assert code == 0, err
    assert json.loads((tmp_path / "o/summary.json").read_text())["spec"]["gamma"] == 4


@pytest.mark.parametrize(
    "option",
    [
        ["--device", "cuda"],
        ["--threads", "2"],
        ["--seqs", "1,2"],
        ["--repeats", "3"],
        ["--timer", "kernels"],
    ],
)
def test_a_measurement_option_beside_roofline_is_refused(monkeypatch, capsys, tmp_path, option):
    args = ("profile", "--roofline", "h200", "--model", "qwen3-8b", *option, "--out", "x.csv")
    err = refused(monkeypatch, capsys, tmp_path, *args)
    assert f"{option[0]} shapes a measurement; --roofline estimates its own grid" in err
    assert f"drop {option[0]}" in err


def test_one_request_prints_na_not_nan(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        monkeypatch, capsys, "run", "--trace", "synthetic:n=1", "--out", "o", "--no-progress"
    )
    assert code == 0, err
    assert "nan" not in out and "n/a" in out
    assert json.loads((tmp_path / "o/summary.json").read_text())["arrival_rate_req_s"] is None


def test_a_scrape_whose_total_contradicts_its_positions_is_noted(monkeypatch, capsys, tmp_path):
    from samples import exposition, scrape

    text = exposition()
    lines = [
        (line.rsplit(" ", 1)[0] + " 100.0")
        if line.startswith('vllm:spec_decode_num_accepted_tokens_total{engine="0"')
        else line
        for line in text.splitlines()
    ]
    path = scrape(tmp_path, "\n".join(lines) + "\n")
    code, _, err = run_cli(monkeypatch, capsys, "acceptance", "show", f"vllm:{path}", "--json")
    assert code == 0, err
    assert "its per-position counters sum to 16049 accepted tokens but " in err
    assert "vllm:spec_decode_num_accepted_tokens says 6519: dsim follows the per-position" in err
    code, _, err = run_cli(
        monkeypatch, capsys, "acceptance", "show", f"vllm:{scrape(tmp_path, exposition())}"
    )
    assert code == 0 and "note" not in err


@pytest.mark.parametrize("command", [["acceptance", "show", "iid:0.8"], ["synth-acceptance"]])
def test_gamma_has_one_cap_everywhere(monkeypatch, capsys, tmp_path, command):
    extra = (
        ["--acceptance", "iid:0.8", "--out", "a.parquet"]
        if command[0] == "synth-acceptance"
        else []
    )
    err = refused(monkeypatch, capsys, tmp_path, *command, *extra, "--gamma", "100")
    assert "--gamma must be an integer >= 1 and <= 64, got 100" in err


def test_a_list_with_a_non_number_names_it(monkeypatch, capsys, tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(
        'policies = ["mtp1"]\n[run]\ntrace = "synthetic:n=5"\n[load]\nrate_scale = [1, "2"]\n'
        "[sla]\nanchors = [100]\n"
    )
    err = refused(monkeypatch, capsys, tmp_path, "pareto", "--config", str(config), "--out", "o")
    assert "load.rate_scale: expected a list of numbers, got a string '2'" in err
