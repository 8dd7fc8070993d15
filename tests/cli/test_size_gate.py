"""The size gate (dsim/size_gate.py): work above its limits is stated and refused without
--yes, by `dsim run`, `dsim pareto` and `dsim check-policy` alike; its counts are the work's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import run_cli

from dsim import size_gate
from dsim.pareto import sweep
from dsim.pareto.config import load_config
from dsim.pareto.size import SAMPLE, sweep_size
from dsim.run_inputs import load_spec_workload
from dsim.size_gate import WorkSize, duration

TRACE = "synthetic:rate=4,n=30,prompt=64,output=8"


def _config(tmp_path: Path, loads: int, seeds: int = 1, run: str = "") -> Path:
    values = ", ".join(f"{1 + i / 100:.2f}" for i in range(loads))
    path = tmp_path / "sweep.toml"
    path.write_text(
        f'policies = ["fixed:1", "fixed:2"]\nseeds = {list(range(seeds))}\n'
        f'[run]\ntrace = "{TRACE}"\n{run}\n[load]\nrate_scale = [{values}]\n'
    )
    return path


def test_the_estimate_is_the_stated_closed_form():
    size = WorkSize("this sweep", 8, 1_000_000, workers=2)
    cost = 8 * size_gate.SECONDS_PER_POINT + 1_000_000 * size_gate.SECONDS_PER_REQUEST
    assert size.estimate_s == pytest.approx(cost / 2)
    assert WorkSize("this run", 1, 10, workers=4).estimate_s == pytest.approx(
        size_gate.SECONDS_PER_POINT + 10 * size_gate.SECONDS_PER_REQUEST
    )  # one point keeps one worker busy
    assert WorkSize("x", 10_000, 5_000_000).over() == []
    assert WorkSize("x", 10_001, 1).over() == ["10,000 points"]
    assert WorkSize("x", 1, 5_000_001).over() == ["5,000,000 simulated requests"]
    hours = round(3 * 3600 / size_gate.SECONDS_PER_POINT)
    assert "2 h" in WorkSize("x", hours, 0, workers=1).over()
    assert [duration(s) for s in (45, 1020, 3 * 3600, 75 * 3600)] == [
        "45 s",
        "17 min",
        "3 h",
        "75 h",
    ]


def test_a_sweep_over_the_point_limit_is_refused_at_once(monkeypatch, capsys, tmp_path):
    calls = []
    monkeypatch.setattr(sweep, "run_point", lambda *a: calls.append(a))
    config, out = _config(tmp_path, loads=1251, seeds=4), tmp_path / "out"
    code, _, err = run_cli(
        monkeypatch, capsys, "pareto", "--config", str(config), "--out", str(out)
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "10,008 points" in err and "above 10,000 points" in err and "pass --yes" in err
    assert "an estimated" in err and "ms a request" in err
    assert not calls and not out.exists()  # nothing simulated, nothing written


def test_a_wrapped_window_run_is_refused_with_its_size(monkeypatch, capsys, tmp_path):
    out = tmp_path / "run"
    args = ["run", "--window", "0:1000000", "--window-wrap", "--out", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *args)  # the shipped trace, replayed 286 times
    assert code == 2 and err.count("\n") == 1, err
    assert "this run is 1 point and 5,530,658 simulated requests, an estimated 45 min" in err
    assert "above 5,000,000 simulated requests; pass --yes to start it" in err
    assert not out.exists()


def test_yes_starts_it_and_says_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(size_gate, "MAX_REQUESTS", 100)
    config, out = _config(tmp_path, loads=2), tmp_path / "out"
    argv = ["pareto", "--config", str(config), "--out", str(out), "--jobs", "1"]
    code, _, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 2 and "above 100 simulated requests" in err and not out.exists()
    code, _, err = run_cli(monkeypatch, capsys, *argv, "--yes")
    assert code == 0, err
    assert "dsim: note: this sweep is 4 points and 120 simulated requests" in err
    assert "starting (--yes)" in err and (out / "report.md").is_file()


def test_long_work_under_the_limits_is_said_before_it_starts(monkeypatch, capsys):
    monkeypatch.setattr(size_gate, "NOTE_SECONDS", 0.0)  # 30 requests are not long
    code, _, err = run_cli(monkeypatch, capsys, "run", "--trace", TRACE, "--no-progress")
    assert code == 0, err
    assert "dsim: note: this run is 1 point and 30 simulated requests" in err
    assert "--yes" not in err


@pytest.mark.parametrize("loads, seeds", [(3, 2), (40, 3)])  # exact, then sampled (120 > 64)
def test_the_sweep_count_is_the_points_workloads(tmp_path, loads, seeds):
    text = 'trace = "synthetic:rate=4,duration=60,prompt=64,output=8"\nwindow = "0:20"'
    path = tmp_path / "s.toml"
    values = ", ".join(f"{1 + i / 100:.2f}" for i in range(loads))
    path.write_text(
        f'policies = ["fixed:1", "fixed:2"]\nseeds = {list(range(seeds))}\n[run]\n{text}\n'
        f"[load]\nrate_scale = [{values}]\n"
    )
    cfg = load_config(path)
    exact = sum(len(load_spec_workload(spec)) for _, _, spec in cfg.specs())
    size = sweep_size(cfg, workers=2)
    assert size.points == len(cfg.specs()) == 2 * loads * seeds
    assert size.sampled == (loads * seeds > SAMPLE)
    if size.sampled:
        assert size.requests == pytest.approx(exact, rel=0.05)
        assert "about " in size.describe()
    else:
        assert size.requests == exact


def test_a_trace_file_is_counted_once_per_load(tmp_path):
    cfg = load_config(_config(tmp_path, loads=2))
    base = replace(cfg.base, trace="traces/azure2023/AzureLLMInferenceTrace_conv.csv")
    cfg = replace(cfg, base=base, seeds=(0, 1, 2))
    assert sweep_size(cfg, 1).requests == 2 * 2 * 3 * 19_366  # the seed does not change it


def test_check_policy_counts_the_instances_it_runs():
    """The gate's count is the property check's own: a passing policy runs exactly that many."""
    from dsim.policies.check import check_property, instance_count
    from dsim.policies.registry import parse_policy

    for trials, factors in ((1, (None,)), (2, (None, 1.0))):
        runs, found = check_property(lambda sla: parse_policy("fixed:2", sla), trials, 0, factors)
        assert found is None and runs == instance_count(trials, factors)


def test_check_policy_past_the_time_limit_is_refused_at_once(monkeypatch, capsys, tmp_path):
    """fixed:2 reads no SLA: one setting, so 5 sizes x 4 gammas x 10M trials."""
    code, _, err = run_cli(monkeypatch, capsys, "check-policy", "fixed:2", "--trials", "10000000")
    assert code == 2 and err.count("\n") == 1
    assert "this check is 1,200,000,000 random instances and 96,000 toy sequences" in err
    assert "above 2 h; pass --yes to start it" in err
