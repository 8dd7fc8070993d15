"""What a serving engineer meets first: vLLM's option names, loads in req/s, settings that would
change nothing said aloud, defaults that resolve anywhere, plain figures, one-line errors and
help that speaks of the tool."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib

import numpy as np
import pandas as pd
import pytest
import typer
from conftest import ROOT, run_cli, write_flat_profile, write_trace
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from dsim import run_commands, shipped
from dsim.cli import app
from dsim.errors import InputError
from dsim.metrics import arrival_rate
from dsim.pareto.config import load_config
from dsim.policies import reads_sla
from dsim.report import figure, summary_table
from dsim.run import simulate
from dsim.run_spec import DEFAULT_PROFILE, DEFAULT_TRACE, RUN_OPTIONS, RunSpec

# --- vLLM's names, --qps ---------------------------------------------------------------------


@pytest.fixture
def parsed(monkeypatch, capsys):
    """The RunSpec `dsim run ARGS` builds (the run itself is stopped before it starts)."""

    def spec_of(*args: str) -> RunSpec:
        seen = []

        def stop(spec):
            seen.append(spec)
            raise InputError(None, None, "stopped")

        monkeypatch.setattr(run_commands, "resolve", stop)
        code, _, err = run_cli(monkeypatch, capsys, "run", *args)
        assert code == 2 and "stopped" in err, err
        return seen[0]

    return spec_of


def test_vllm_names_make_the_same_spec(parsed):
    ours = parsed("--gamma", "5", "--max-seqs", "8", "--max-num-batched-tokens", "512")
    vllm = parsed("--num-speculative-tokens", "5", "--max-num-seqs", "8",
                  "--max-num-batched-tokens", "512")  # fmt: skip
    assert ours == vllm and (ours.gamma, ours.max_seqs) == (5, 8)


@pytest.mark.parametrize("qps", ["8", "0.25"])
def test_qps_is_the_synthetic_traces_rate(parsed, qps):
    via_qps = parsed("--trace", "synthetic:cv=2,n=5", "--qps", qps)
    assert via_qps == parsed("--trace", f"synthetic:cv=2,n=5,rate={qps}")
    assert parsed("--trace", "synthetic", "--qps", qps).trace == f"synthetic:rate={qps}"


@pytest.mark.parametrize(
    ("trace", "expected"),
    [
        ("traces/azure2023/AzureLLMInferenceTrace_conv.csv", "use --rate-scale"),
        ("synthetic:rate=4,n=5", "both set the rate: give one"),
    ],
)
def test_qps_refused_where_it_cannot_apply(monkeypatch, capsys, trace, expected):
    code, out, err = run_cli(monkeypatch, capsys, "run", "--trace", trace, "--qps", "4")
    assert code == 2 and err.count("\n") == 1 and "--qps" in err, err
    assert expected.replace("use ", "") in err


def test_pareto_run_table_takes_vllm_names_and_only_run_options(tmp_path):
    base = """policies = ["mtp1"]\n[load]\nrate_scale = [1]\n[run]\n"""
    path = tmp_path / "s.toml"
    path.write_text(base + 'trace = "synthetic:rate=2,n=4"\nmax_num_seqs = 8\n'
                    "num_speculative_tokens = 3\n")  # fmt: skip
    cfg = load_config(path)
    assert (cfg.base.max_seqs, cfg.base.gamma) == (8, 3)
    for key, value in (("fused_prefill", "false"), ("out", '"x"'), ("progress", "true")):
        path.write_text(base + f"{key} = {value}\n")
        with pytest.raises(InputError) as err:
            load_config(path)
        assert str(err.value).startswith(f"{path}: run.{key}: unknown key"), str(err.value)
    path.write_text(base + "max_seqs = 4\nmax_num_seqs = 8\n")
    with pytest.raises(InputError, match="run.max_num_seqs: is run.max_seqs"):
        load_config(path)


def test_run_options_are_dsim_runs_options():
    """[run] takes exactly what `dsim run` takes (RunSpec fields it has an option for)."""
    command = typer.main.get_command(app).commands["run"]
    options = {p.name for p in command.params}
    assert set(RUN_OPTIONS) == {f for f in RunSpec.__dataclass_fields__ if f in options}


# --- settings that would change nothing --------------------------------------------------------


def test_a_fixed_length_beyond_gamma_is_refused_with_the_fix(monkeypatch, capsys, tmp_path):
    code, out, err = run_cli(
        monkeypatch, capsys, "run", "--policy", "fixed:9", "--gamma", "7", "--no-progress"
    )
    assert code == 2 and out == ""
    assert err == (
        "dsim: error: policy fixed:9 verifies 9 drafts a round but gamma (drafts proposed per "
        "round) is 7: raise gamma to 9 or use fixed:7\n"
    )
    path = tmp_path / "s.toml"
    path.write_text('policies = ["mtp1", "fixed:6"]\n[run]\ngamma = 5\n[load]\nrate_scale = [1]\n')
    with pytest.raises(InputError, match=r"s.toml: policies: policy fixed:6 .* use fixed:5"):
        load_config(path)


def test_an_sla_the_policy_ignores_is_warned_once_and_repeated_in_the_summary(
    monkeypatch, capsys, tmp_path
):
    profile = write_flat_profile(tmp_path / "flat.csv", 10.0)
    args = ["run", "--trace", "synthetic:rate=5,n=6,output=8", "--profile", str(profile),
            "--acceptance", "iid:0.7", "--sla-tps", "40", "--no-progress"]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, *args, "--policy", "fixed:3", "--out",
                             str(tmp_path / "o"))  # fmt: skip
    line = "--sla-tps 40 has no effect on policy fixed:3 (only goodput, dspark, dspark-async "
    line += "and plug-ins read it)"
    assert code == 0 and err == f"dsim: warning: {line}\n"
    assert f"warning: {line}\n" in out
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["warnings"] == [line]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--policy", "dspark")
    assert code == 0 and err == "" and "warning" not in out


def test_which_policies_read_the_sla():
    assert [reads_sla(p) for p in ("goodput", "dspark", "dspark-async", "my_mod:Mine")] == [
        True
    ] * 4
    assert not any(reads_sla(p) for p in ("ar", "mtp1", "fixed:3", "threshold:0.5", "oracle"))


# --- defaults that resolve anywhere -------------------------------------------------------------


def test_dsim_run_with_its_defaults_works_from_another_directory(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        monkeypatch, capsys, "run", "--window", "0:5", "--no-progress", "--out", "o"
    )
    assert code == 0, err
    spec = json.loads((tmp_path / "o" / "summary.json").read_text())["spec"]
    assert (spec["trace"], spec["profile"]) == (DEFAULT_TRACE, DEFAULT_PROFILE)  # as spelled


def test_the_default_traces_lengths_resolve_from_another_directory(monkeypatch, capsys, tmp_path):
    """--max-concurrency replays the default trace's lengths (`lengths=` inside the synthetic
    spec it becomes): they too come from the package's copy, not the working directory."""
    monkeypatch.chdir(tmp_path)
    args = ("--max-concurrency", "4", "--num-prompts", "20", "--no-progress", "--out", "o")
    code, _, err = run_cli(monkeypatch, capsys, "run", *args)
    assert code == 0, err
    prompts = pd.read_parquet(tmp_path / "o" / "requests.parquet")["prompt_tokens"]
    first = pd.read_csv(shipped.DATA / DEFAULT_TRACE, nrows=20)["ContextTokens"]
    assert sorted(prompts) == sorted(first)  # the trace's first 20 rows


def test_the_defaults_are_package_data_with_the_checkouts_bytes(monkeypatch, tmp_path):
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = package_data["package-data"]["dsim"]
    monkeypatch.chdir(tmp_path)
    for default in (DEFAULT_TRACE, DEFAULT_PROFILE, DEFAULT_PROFILE.replace(".csv", ".json"),
                    "traces/azure2023/LICENSE"):  # fmt: skip
        found = shipped.locate(default)
        inside = shipped.DATA / default
        assert found == str(inside) and inside.is_file()
        assert inside.read_bytes() == (ROOT / default).read_bytes()
        relative = str(inside.relative_to(ROOT / "dsim"))
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative
    assert shipped.locate("no/such.csv") == "no/such.csv"  # its reader says it is missing


def test_a_path_that_exists_here_is_read_as_given(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    assert shipped.locate(DEFAULT_TRACE) == DEFAULT_TRACE  # experiments keep their paths
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    mine = write_flat_profile(tmp_path / DEFAULT_PROFILE, 3.0)
    assert shipped.locate(DEFAULT_PROFILE) == DEFAULT_PROFILE and mine.is_file()


# --- plain figures, loads in req/s, disaggregated rows ---------------------------------------


@given(st.floats(1e-6, 1e9))
def test_figures_are_plain_with_four_significant_digits(x):
    text = figure(x)
    assert "e" not in text
    assert abs(float(text) - x) <= 0.5 * 10 ** (np.floor(np.log10(x)) - 3) * (1 + 1e-9)


def test_figure_examples():
    assert [figure(v) for v in (13930.4, 4.6642, 0.0014634, 250.0, 0.0)] == [
        "13930", "4.664", "0.001463", "250.0", "0"
    ]  # fmt: skip


def test_arrival_rate_is_one_over_the_mean_gap(tmp_path):
    assert arrival_rate(np.arange(10.0) * 0.5) == pytest.approx(2.0)
    assert np.isnan(arrival_rate(np.zeros(3)))  # a closed-loop burst at 0


def test_the_table_shows_req_s_and_a_disaggregated_runs_split(tmp_path):
    profile = write_flat_profile(tmp_path / "flat.csv", 10.0)
    trace = write_trace(tmp_path / "t.jsonl", np.arange(8) * 0.25, [64] * 8, [9] * 8)
    spec = RunSpec(trace=str(trace), profile=str(profile), acceptance="iid:0.7", policy="mtp1",
                   disagg="1:2", kv_bytes_per_token=1e5, kv_link_gbps=100.0)  # fmt: skip
    summary = simulate(spec).summary
    assert summary["arrival_rate_req_s"] == pytest.approx(4.0)
    console = Console(record=True, width=100)
    console.print(summary_table(summary, "t"))
    text = console.export_text()
    assert re.search(r"arrival rate\s+│\s+4\.000 │ req/s", text), text
    assert re.search(r"P:D split\s+│\s+1:2 │", text)
    kv = 64 * 1e5 * 8 / 100e9
    assert f"{figure(kv)} / {figure(kv)}" in text and "prefill busy mean / max" in text
    assert not re.search(r"\d[eE][+-]\d", text)  # no exponents anywhere in the table


# --- one-line errors, help that speaks of the tool ---------------------------------------------


def test_an_error_line_has_no_empty_line_before_it(monkeypatch, capsys, tmp_path):
    """The progress bar is on by default; off a terminal it must leave nothing behind."""
    code, _, err = run_cli(monkeypatch, capsys, "run", "--trace", str(tmp_path / "none.csv"))
    assert code == 2 and err == f"dsim: error: {tmp_path / 'none.csv'}: file not found\n"


HISTORY = re.compile(r"\bissues?\b|\bv0\.\d|\bsessions?\b", re.IGNORECASE)


def _helps(command) -> list[str]:
    texts = [command.help or "", command.short_help or ""]
    texts += [getattr(p, "help", None) or "" for p in command.params]
    for sub in getattr(command, "commands", {}).values():
        texts += _helps(sub)
    return texts


def test_help_and_source_speak_of_the_tool_not_its_history():
    helps = [t for t in _helps(typer.main.get_command(app)) if HISTORY.search(t)]
    assert not helps, helps
    sources = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in sorted((ROOT / "dsim").rglob("*.py"))
        for m in HISTORY.finditer(path.read_text())
    ]
    assert not sources, sources
    assert HISTORY.search("targets of issue 17") and HISTORY.search("dsim v0.3")


# --- the worked examples in docs/ ---------------------------------------------------------------


def test_the_readmes_example_scrape_reads_as_the_walkthrough_says():
    from dsim.acceptance.vllm_metrics import read_vllm_acceptance

    acc = read_vllm_acceptance(ROOT / "docs" / "examples" / "vllm_scrape.prom")
    np.testing.assert_allclose(acc.unconditional, [0.76, 0.57, 0.38])
    assert acc.tau == pytest.approx(2.71)


def test_the_readmes_example_policy_never_reads_the_confidences():
    from dsim.policies import parse_policy

    policy = parse_policy(f"{ROOT}/docs/examples/short_when_busy.py:ShortWhenBusy")
    rng = np.random.default_rng(0)
    for rows in (1, 8, 9, 40):
        a, b = (policy.lengths(rng.random((rows, 5)), None, None) for _ in range(2))
        assert (a == b).all() and set(a) == ({5} if rows <= 8 else {2})


def test_the_readmes_example_sweep_is_a_valid_config(monkeypatch, tmp_path):
    text = (ROOT / "docs" / "examples" / "h100_sweep.toml").read_text()
    path = tmp_path / "s.toml"
    path.write_text(text.replace("runs/h100-qwen3-8b.csv", DEFAULT_PROFILE))  # no estimate here
    monkeypatch.chdir(tmp_path)  # its trace path resolves to the package's copy
    cfg = load_config(path)
    assert cfg.policies == ("mtp1", "fixed:3", "dspark") and cfg.loads == (1, 4, 16)
