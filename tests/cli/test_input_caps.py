"""Every count has a documented range, checked before any work; results are finite or the run
is refused; a scrape's labels and a profile sidecar's fields are validated like any input."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, run_cli, write_flat_profile, write_trace
from samples import ENGINES, MODEL, exposition, scrape
from test_bad_input import rejected  # noqa: F401  (the bad-input contract fixture)

from dsim.acceptance.vllm_metrics import read_vllm_acceptance
from dsim.errors import InputError
from dsim.pareto import sweep

PROFILE = str(ROOT / "profiles/h200-qwen3-8b-roofline.csv")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replicas", "1000000000"], "--replicas must be a whole number >= 1 and <= 1024"),
        (["--replicas", "99999999999999999999"], "<= 1024"),
        (["--disagg", "1000000000:1"], "P + D must be at most 1024"),
        (["--disagg", "1_0:1"], "--disagg '1_0:1': expected P:D"),
        (["--disagg", "1e1:1"], "expected P:D"),
        (["--max-seqs", "1000000000000"], "max_seqs must be an integer >= 1 and <= 65536"),
        (["--gamma", "100000"], "gamma must be an integer >= 1 and <= 64"),
        (["--kv-tokens", "9" * 400], "Invalid value for '--kv-tokens'"),
        (["--seed", str(2**64)], "seed must be an integer >= 0 and <= 9223372036854775807"),
        (["--max-requests", str(2**50)], "max_requests must be an integer"),
        (["--disagg", "1:1", "--kv-link-gbps", "1e-308"], "--kv-link-gbps 1e-308 with"),
        (["--disagg", "1:1", "--kv-bytes-per-token", "1e308"], "--kv-bytes-per-token must be"),
        (["--disagg", "1:1", "--kv-link-gbps", "1e-9"], "more than 1 s: raise the bandwidth"),
    ],
)
def test_counts_and_sizes_out_of_range(rejected, args, message):  # noqa: F811
    assert message in rejected(*args)


def test_the_largest_seed_runs_and_is_written(monkeypatch, capsys, tmp_path):
    out = tmp_path / "o"
    args = ("run", "--trace", "synthetic:n=3", "--seed", str(2**63 - 1), "--out", str(out))
    code, _, err = run_cli(monkeypatch, capsys, *args, "--no-progress")
    assert code == 0, err
    assert json.loads((out / "summary.json").read_text())["spec"]["seed"] == 2**63 - 1


# --- sweep configs: counts checked with the config, naming it and the key ----------------

SWEEP = f"""
policies = ["fixed:1"]
[run]
trace = "synthetic:rate=4,duration=4,prompt=100,output=24"
profile = "{PROFILE}"
RUN
[load]
LOAD
[sla]
anchors = [100]
"""


@pytest.mark.parametrize(
    ("run", "load", "message"),
    [
        ("", "replicas = [100000000]", "load.replicas: --replicas must be a whole number"),
        ('disagg = "1:1"', "replicas = [1, 2]", "load.replicas: run.disagg sets the replicas"),
        ("", "max_seqs = [1e12]", "max_seqs must be an integer >= 1 and <= 65536"),
        ("", "rate_scale = [1]\n[x]", "x: unknown key"),
    ],
)
def test_sweep_counts_are_checked_with_the_config(
    monkeypatch, capsys, tmp_path, run, load, message
):
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.replace("RUN", run).replace("LOAD", load))
    calls = []
    monkeypatch.setattr(sweep, "run_point", lambda *a: calls.append(a))
    out = tmp_path / "out"
    code, _, err = run_cli(
        monkeypatch, capsys, "pareto", "--config", str(config), "--out", str(out), "--no-progress"
    )
    assert code == 2 and err.count("\n") == 1 and str(config) in err and message in err
    assert not calls and not out.exists()


def test_seeds_beyond_int64_are_refused_with_the_config(monkeypatch, capsys, tmp_path):
    config = tmp_path / "sweep.toml"
    text = SWEEP.replace("RUN", "").replace("LOAD", "rate_scale = [1]")
    config.write_text("seeds = [18446744073709551616]\n" + text)
    code, _, err = run_cli(
        monkeypatch, capsys, "pareto", "--config", str(config), "--out", str(tmp_path / "o")
    )
    assert code == 2 and "seeds: seeds must be at most 9223372036854775807" in err


# --- vLLM scrapes ------------------------------------------------------------------------


def _positions(text: str, old: str, new: str) -> str:
    return text.replace(f'position="{old}"', f'position="{new}"')


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: _positions(t, "0", "00"), "position label must be one of 0, 1, ..., 1023"),
        (lambda t: _positions(t, "2", "+2"), "got '+2'"),
        (lambda t: _positions(t, "2", "999999999"), "got '999999999'"),
        (lambda t: _positions(t, "1", "١"), "position label"),  # an Arabic-Indic digit one
        (
            lambda t: t.replace('engine="0",model_name', 'engine="0",engine="9",model_name'),
            "label 'engine' given twice",
        ),
    ],
)
def test_scrape_labels_are_canonical(tmp_path, edit, message):
    with pytest.raises(InputError) as err:
        read_vllm_acceptance(scrape(tmp_path, edit(exposition())))
    assert message in str(err.value)


def test_a_duplicate_position_spelt_two_ways_is_not_summed(tmp_path):
    text = exposition()
    line = next(x for x in text.splitlines() if 'position="0"' in x and "_created" not in x)
    text += line.replace('position="0"', 'position="00"') + "\n"
    with pytest.raises(InputError, match="no leading zeros"):
        read_vllm_acceptance(scrape(tmp_path, text))


def test_counter_sums_that_overflow_are_refused(tmp_path):
    huge = {e: (1e308, 1e308, (6e307, 3e307, 1e307)) for e in ENGINES}  # each finite
    with pytest.raises(InputError, match="the counters' sums overflow"):
        read_vllm_acceptance(scrape(tmp_path, exposition(huge)))


@pytest.mark.parametrize("name", ["org/model,v2", 'odd "quoted", [bracketed] name'])
def test_a_model_name_with_commas_is_selectable_when_quoted(tmp_path, name):
    path = scrape(tmp_path, exposition(model=name) + exposition(model=MODEL))
    quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    from dsim.acceptance.sources import parse_acceptance

    source = parse_acceptance(f"vllm:{path}[model={quoted}]", 3)
    assert source.domains[0].name == name


# --- profile sidecars --------------------------------------------------------------------

GOOD = {"num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 128}


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [
        (
            {"model_config": GOOD | {"num_hidden_layers": "36"}},
            "num_hidden_layers: must be a whole",
        ),
        ({"model_config": GOOD | {"num_hidden_layers": True}}, "got True"),
        ({"model_config": GOOD | {"num_hidden_layers": 0}}, "got 0"),
        ({"model_config": GOOD | {"num_key_value_heads": -8}}, "num_key_value_heads"),
        ({"model_config": GOOD | {"head_dim": 10**12}}, "head_dim: must be a whole number in"),
        ({"model_config": GOOD | {"num_hidden_layers": 4.5}}, "got 4.5"),
        ({"model_config": "36 layers"}, "model_config: expected an object"),
        ({"kv_bytes_per_token": True}, "kv_bytes_per_token must be a finite number > 0"),
        ({"kv_bytes_per_token": 0}, "kv_bytes_per_token must be"),
        ({"kv_bytes_per_token_per_gpu": -1}, "kv_bytes_per_token_per_gpu must be"),
        ({"kv_bytes_per_token_per_gpu": "lots"}, "kv_bytes_per_token_per_gpu must be"),
        ({"kv_bytes_per_token_per_gpu": 1e300}, "kv_bytes_per_token_per_gpu must be"),
    ],
)
def test_sidecar_kv_fields_are_blamed_on_the_sidecar(rejected, tmp_path, sidecar, message):  # noqa: F811
    profile = write_flat_profile(tmp_path / "prof.csv", 10.0)
    side = profile.with_suffix(".json")
    side.write_text(json.dumps({"dtype": "bfloat16", **sidecar}))
    err = rejected("--disagg", "1:1", "--profile", str(profile))
    assert f"{side}: " in err and message in err and "--kv-bytes-per-token" not in err


def test_a_good_sidecar_still_gives_the_kv_size(monkeypatch, capsys, tmp_path):
    profile = write_flat_profile(tmp_path / "prof.csv", 10.0)
    profile.with_suffix(".json").write_text(json.dumps({"dtype": "bfloat16", "model_config": GOOD}))
    trace = write_trace(tmp_path / "t.jsonl", [0.0], [100], [4])
    args = ("run", "--trace", str(trace), "--profile", str(profile), "--disagg", "1:1")
    code, _, err = run_cli(monkeypatch, capsys, *args, "--no-progress")
    assert code == 0, err
