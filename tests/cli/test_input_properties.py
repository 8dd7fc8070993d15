"""Every numeric input of `dsim run`, `dsim profile --roofline` and a sweep's TOML, drawn from
the whole line (NaN, infinities, zero, negatives, subnormals, 1e308, integers past int64): the
command either runs and every figure it writes is finite (or null where undefined), or it
refuses with one line and exit 2, leaving nothing behind. Never a traceback, never exit 1."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from conftest import ROOT, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_reliability import OPTIONS

from dsim.errors import InputError
from dsim.pareto.config import load_config
from dsim.run import simulate

FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-308, 5e-324, 1e-9, 0.5, 1.0, 7.0, 101.0, 1e9, 1e308]),
)
INTS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2, 7, 8, 64, 65, 65536, 2**31, 2**40 + 1, 2**63, 2**64]),
)
NUMBERS = st.one_of(FLOATS, INTS)
SETTINGS = settings(
    max_examples=12,
    derandomize=True,  # the same draws on every machine: a CI failure reproduces
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def text(value: float) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def finite_figures(obj) -> bool:
    """Every number in a JSON document finite (JSON has no NaN: undefined figures are null)."""
    if isinstance(obj, dict):
        return all(finite_figures(v) for v in obj.values())
    if isinstance(obj, list):
        return all(finite_figures(v) for v in obj)
    return not isinstance(obj, float) or math.isfinite(obj)


def outcome(monkeypatch, capsys, folder, args: list[str], written: str) -> int:
    """Run `dsim ARGS` in an empty `folder`; check the contract; return the exit code."""
    monkeypatch.chdir(folder)
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert "Traceback" not in err, err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("dsim: error: "), err
        assert list(folder.iterdir()) == [], "a refused command left files"
    else:
        assert code == 0, err
        assert (folder / written).exists()
    return code


# --- dsim run: every numeric option, and the numbers inside its spec strings ----------------

# The random dataset's lengths are left out: a legal length (up to 2^20 tokens) over its
# 1,000 prompts simulates for minutes, and their bounds are tested in test_bench_names.py.
SLOW = ("--plugin-timeout", "--random-input-len", "--random-output-len")
RUN_FLAGS = [(f, k) for p, f, k in OPTIONS if p == ["run"] and f not in SLOW]
# Numbers written inside spec strings: {} is the drawn value.
RUN_SPECS = [
    ("--draft-cost", "ratio:{}"),
    ("--acceptance", "iid:0.8[spread={}]"),
    ("--acceptance", "iid:0.8[spread_req={}]"),
    ("--acceptance", "iid:0.8[overconf={}]"),
    ("--acceptance", "preset:dspark:chat[rho={}]"),
    ("--acceptance", "positions:0.9,{}"),
    ("--trace", "synthetic:n=4,rate={}"),
    ("--trace", "synthetic:n=4,prompt={}"),
    ("--trace", "synthetic:n=4,output={}"),
    ("--trace", "synthetic:n=4,cv={}"),
    ("--trace", "synthetic:n=4,concurrency={}"),
    ("--sched-cost", "auto:{}"),
    ("--window", "0:{}"),
]
BASE = ["--trace", "synthetic:n=4,prompt=64,output=8", "--no-progress"]


def _run_result(folder) -> None:
    summary = json.loads((folder / "o/summary.json").read_text())
    assert finite_figures(summary), summary
    requests = pd.read_parquet(folder / "o/requests.parquet")
    assert requests.select_dtypes("number").apply(lambda c: c.map(math.isfinite)).all().all()


@pytest.mark.parametrize(("flag", "kind"), RUN_FLAGS, ids=[f for f, _ in RUN_FLAGS])
@SETTINGS
@given(data=st.data())
def test_run_option_is_finite_in_range_or_refused(
    monkeypatch, capsys, tmp_path_factory, flag, kind, data
):
    value = data.draw(FLOATS if kind is float else INTS)
    args = [*BASE, flag, text(value)]
    if flag == "--qps":
        args[1] = "synthetic:n=4,prompt=64,output=8"
    if flag in ("--kv-link-gbps", "--kv-bytes-per-token"):
        args += ["--disagg", "1:1", "--profile", str(ROOT / "profiles/h200-qwen3-8b-roofline.csv")]
    folder = tmp_path_factory.mktemp("run")
    if outcome(monkeypatch, capsys, folder, ["run", *args, "--out", "o"], "o") == 0:
        _run_result(folder)


@pytest.mark.parametrize(("flag", "template"), RUN_SPECS, ids=[t for _, t in RUN_SPECS])
@SETTINGS
@given(data=st.data())
def test_run_spec_number_is_finite_in_range_or_refused(
    monkeypatch, capsys, tmp_path_factory, flag, template, data
):
    value = data.draw(NUMBERS)
    args = [*BASE, flag, template.format(text(value))]
    if flag == "--trace":
        args[1] = template.format(text(value)) + ("" if "output=" in template else ",output=8")
        args = args[:3]
    folder = tmp_path_factory.mktemp("spec")
    if outcome(monkeypatch, capsys, folder, ["run", *args, "--out", "o"], "o") == 0:
        _run_result(folder)


# --- dsim profile --roofline: every numeric option it reads ----------------------------------

PROFILE_INPUTS = [
    ("--tp", INTS),
    ("--ep", INTS),
    ("--overhead-scale", FLOATS),
    ("--contexts", INTS),
]


@pytest.mark.parametrize(("flag", "values"), PROFILE_INPUTS, ids=[f for f, _ in PROFILE_INPUTS])
@SETTINGS
@given(data=st.data())
def test_profile_option_is_finite_in_range_or_refused(
    monkeypatch, capsys, tmp_path_factory, flag, values, data
):
    value = data.draw(values)
    model = "qwen3-30b-a3b" if flag == "--ep" else "qwen3-8b"
    extra = ["--tp", text(value)] if flag == "--ep" else []
    args = ["profile", "--roofline", "h200", "--model", model, flag, text(value), *extra]
    folder = tmp_path_factory.mktemp("profile")
    if outcome(monkeypatch, capsys, folder, [*args, "--out", "p.csv"], "p.csv") == 0:
        df = pd.read_csv(folder / "p.csv")
        assert df["latency_ms"].map(math.isfinite).all() and (df["latency_ms"] > 0).all()
        meta = json.loads((folder / "p.json").read_text())
        assert finite_figures(meta) and meta["points_over_memory"] < len(df)


# --- a sweep's TOML: every numeric key, read as the sweep reads it --------------------------

TOML_KEYS = [
    ("run", "gamma"),
    ("run", "seed"),
    ("run", "rate_scale"),
    ("run", "max_requests"),
    ("run", "max_seqs"),
    ("run", "kv_tokens"),
    ("run", "prefill_chunk"),
    ("run", "max_num_batched_tokens"),
    ("run", "sla_tps"),
    ("run", "ragged_penalty"),
    ("run", "replicas"),
    ("run", "kv_link_gbps"),
    ("run", "kv_bytes_per_token"),
    ("load", "rate_scale"),
    ("load", "max_seqs"),
    ("load", "replicas"),
    ("sla", "anchors"),
    ("sla", "ttft_p50_s"),
    ("", "seeds"),
]
LISTS = {("load", "rate_scale"), ("load", "max_seqs"), ("load", "replicas"), ("sla", "anchors")}
LISTS |= {("", "seeds")}


def toml_value(value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}[repr(value)]
    return text(value)


def sweep_toml(table: str, key: str, value: float) -> str:
    written = f"[{toml_value(value)}]" if (table, key) in LISTS else toml_value(value)
    tables = {
        "run": {"trace": '"synthetic:n=4,prompt=64,output=8"'},
        "load": {"rate_scale": "[1]"},
        "sla": {"anchors": "[10]"},
    }
    top = {"policies": '["mtp1"]'}
    if table == "load":
        tables["load"] = {key: written}
    else:
        (top if table == "" else tables[table])[key] = written
    lines = [f"{k} = {v}" for k, v in top.items()]
    for name, body in tables.items():
        lines += [f"[{name}]", *(f"{k} = {v}" for k, v in body.items())]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("table", "key"), TOML_KEYS, ids=[f"{t}.{k}" for t, k in TOML_KEYS])
@SETTINGS
@given(data=st.data())
def test_toml_number_is_finite_in_range_or_refused(tmp_path_factory, table, key, data):
    value = data.draw(NUMBERS)
    path = tmp_path_factory.mktemp("toml") / "sweep.toml"
    path.write_text(sweep_toml(table, key, value))
    try:
        config = load_config(path)
    except InputError as err:
        line = str(err)
        assert line.startswith(str(path)) and "\n" not in line, line
        return
    _, _, spec = config.specs()[0]
    try:  # what only the run can know (a request larger than the KV cache) is input too
        result = simulate(spec)
    except InputError as err:
        assert "\n" not in str(err)
        return
    assert finite_figures(
        json.loads(json.dumps(result.summary, default=float).replace("NaN", "null"))
    )
