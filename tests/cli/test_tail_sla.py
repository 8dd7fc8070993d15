"""Tail SLAs: the summary's latency percentiles (vllm bench serve's definitions), bounds read
once from `dsim run --sla` or a sweep's `[sla]`, each judged met or missed, and a sweep
point's seeds met in all, some or none."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, refused, run_cli

from dsim.errors import InputError
from dsim.pareto.config import load_config
from dsim.pareto.exclusion import exclusions, sla_met
from dsim.run import simulate
from dsim.run_spec import RunSpec
from dsim.sla import KEYS, Bound, parse_options, read

PROFILE = str(ROOT / "profiles/h200-qwen3-8b-roofline.csv")


@pytest.fixture(scope="module")
def result():
    return simulate(RunSpec(trace="synthetic:n=120,rate=6,prompt=300,output=40", profile=PROFILE))


def test_summary_latencies_follow_their_definitions(result):
    """E2EL = finish - send, TPOT = (E2EL - TTFT) / (output - 1) (first token excluded), each
    at p50, p90, p99 and the mean; every SLA key is a summary field."""
    r, s = result.requests, result.summary
    e2el = (r["finish_s"] - r["arrival_s"]).to_numpy()
    ttft = (r["first_token_s"] - r["arrival_s"]).to_numpy()
    many = (r["output_tokens"] > 1).to_numpy()
    tpot = ((e2el - ttft)[many]) / (r["output_tokens"].to_numpy()[many] - 1)
    for q in (50, 90, 99):
        assert s[f"e2el_p{q}_s"] == pytest.approx(np.percentile(e2el, q))
        assert s[f"tpot_p{q}_s"] == pytest.approx(np.percentile(tpot, q))
    assert s["tpot_mean_s"] == pytest.approx(tpot.mean())
    assert s["request_throughput_req_s"] == pytest.approx(len(r) / s["duration_s"])
    assert s["itl_p50_s"] <= s["itl_p90_s"] <= s["itl_p99_s"]
    assert set(KEYS) <= set(s)


def test_bounds_judge_upper_and_lower():
    assert Bound("ttft_p99_s", 2.0).met(2.0) and not Bound("ttft_p99_s", 2.0).met(2.01)
    assert Bound("tps_p10", 20.0).met(20.0) and not Bound("tps_p10", 20.0).met(19.9)
    assert not Bound("tpot_p50_s", 1.0).met(math.nan)  # nothing measured is not met


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("ttft_p95_s=1", "unknown percentile p95 in 'ttft_p95_s'"),
        ("latency_p99_s=1", "unknown SLA metric 'latency_p99_s'"),
        ("tps_p99=1", "unknown percentile p99 in 'tps_p99'"),
        ("tpot_p99_s=-0.05", "must be a finite number > 0"),
        ("tpot_p99_s=inf", "must be a finite number > 0"),
        ("tpot_p99_s", "expected KEY=VALUE"),
        ("tpot_p99=0.05", "'tpot_p99' has the wrong unit (seconds, suffix _s): did you mean"),
        ("tpot_p99_ms=50", "'tpot_p99_ms' has the wrong unit (seconds, suffix _s)"),
        ("tps_p10_s=20", "'tps_p10_s' has the wrong unit (tok/s, no suffix): did you mean"),
        ("tpot_p99_s=0.05,ttft_p99_s=2", "one bound per --sla; repeat the option for more"),
    ],
)
def test_bad_sla_is_one_line_exit_2_nothing_written(
    monkeypatch, capsys, tmp_path, option, expected
):
    assert expected in refused(
        monkeypatch, capsys, tmp_path, "--trace", "synthetic:n=5", "--sla", option
    )


def test_sla_twice_is_refused():
    with pytest.raises(InputError, match="given twice; give each once"):
        parse_options(["ttft_p99_s=1", "ttft_p99_s=2"])


def test_run_judges_each_bound(monkeypatch, capsys, tmp_path):
    out = tmp_path / "o"
    code, stdout, _ = run_cli(
        monkeypatch, capsys, "run", "--trace", "synthetic:n=40,rate=4,prompt=200,output=30",
        "--profile", PROFILE, "--sla", "tpot_p99_s=10", "--sla", "ttft_p50_s=1e-9",
        "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    verdicts = {v["key"]: v for v in summary["sla"]}
    assert verdicts["tpot_p99_s"]["met"] and not verdicts["ttft_p50_s"]["met"]
    assert verdicts["tpot_p99_s"]["value"] == summary["tpot_p99_s"]
    assert "SLA ttft_p50_s" in stdout and "MISSED" in stdout


def test_seeds_met_in_all_some_none():
    points = pd.DataFrame(
        {
            "policy": ["a"] * 6,
            "layout": [""] * 6,
            "load": [1, 1, 2, 2, 3, 3],
            "seed": [0, 1] * 3,
            "tpot_p99_s": [0.01, 0.02, 0.01, 0.09, 0.08, 0.09],
        }
    )
    sla = read([("tpot_p99_s", 0.05)])
    assert list(sla_met(points, sla)) == ["all", "all", "some", "some", "none", "none"]
    assert list(exclusions(points, sla)) == ["", ""] + ["tpot_p99_s > 0.05"] * 4


def _sweep(tmp_path: Path, sla: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(
        f'policies = ["mtp1"]\n[run]\ntrace = "synthetic:n=20,rate=4"\nprofile = "{PROFILE}"\n'
        f"[load]\nrate_scale = [1]\n[sla]\nanchors = [50]\n{sla}\n"
    )
    return path


def test_sweep_sla_table_takes_every_key(tmp_path):
    cfg = load_config(_sweep(tmp_path, "tpot_p99_s = 0.05\nitl_p90_s = 0.1\ntps_p1 = 5"))
    assert [str(b) for b in cfg.sla.bounds] == [
        "tpot_p99_s <= 0.05",
        "itl_p90_s <= 0.1",
        "tps_p1 >= 5",
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ttft_p95_s = 1", "sla.ttft_p95_s: unknown percentile p95"),
        ("speed_p50 = 1", "sla.speed_p50: unknown SLA metric"),
        ("ttft_p99_s = -2", "sla.ttft_p99_s: SLA ttft_p99_s must be a finite number > 0"),
        ('ttft_p99_s = "2"', "sla.ttft_p99_s: SLA ttft_p99_s must be a finite number"),
    ],
)
def test_bad_sweep_sla(tmp_path, line, expected):
    with pytest.raises(InputError, match=expected.replace("(", r"\(")):
        load_config(_sweep(tmp_path, line))
