"""dsim pareto: config validation, executors, resumable cache, frontier math."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from samples import SWEEP_PROFILE as PROFILE
from samples import TINY

from dsim import cli
from dsim.errors import InputError
from dsim.fileio import SCHEMA_KEY, SCHEMA_VERSION
from dsim.pareto import sweep
from dsim.pareto.config import load_config
from dsim.pareto.frontier import (
    matched_gains,
    pareto_front,
    seed_fronts,
    seed_means,
    sla_throughputs,
    speed_at_throughput,
    throughput_at_sla,
)
from dsim.pareto.pipeline import prepare, run_pareto
from dsim.pareto.report import sla_section


def _config(tmp_path: Path, text: str = TINY) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


# --- config validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("gamma = 4", "gamma = 4\ngama = 5"), "run.gama: unknown key"),
        (("gamma = 4", 'gamma = "four"'), "run.gamma: expected an integer, got a string"),
        (("rate_scale = [1, 3]", "rate_scale = [1, true]"), "load.rate_scale: expected a list"),
        (("rate_scale = [1, 3]", "max_seqs = [4]\nrate_scale = [1]"), "exactly one load axis"),
        ((PROFILE, "no/such/profile.csv"), "run.profile: no/such/profile.csv: file not found"),
        (('"dspark"]', '"dspark", "bogus"]'), "policies: unknown policy 'bogus'"),
        (("[sla]", "colour = 1\n[sla]"), "load.colour: unknown key"),
        (("policies", "polices"), "polices: unknown key"),
        (
            ("gamma = 4", 'gamma = 4\nwindow = "a:b"'),
            "run.trace: --window 'a:b': START must be a number",
        ),
        (("[run]", "seeds = [0, 0]\n[run]"), "seeds: seeds must be distinct integers >= 0"),
        (("[run]", "seeds = [1.5]\n[run]"), "seeds: expected a non-empty list of integers"),
        (("[run]", "seeds = [0, 1]\n[run]\nseed = 3"), "seeds: set either seeds or run.seed"),
    ],
)
def test_config_errors_are_one_line_exit_2_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, edit, message
) -> None:
    path = _config(tmp_path, TINY.replace(*edit, 1))
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["dsim", "pareto", "--config", str(path), "--out", str(out)])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(err.strip().splitlines()) == 1
    assert message in err and str(path) in err
    assert not out.exists()


def test_missing_config_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="config file not found"):
        load_config(tmp_path / "absent.toml")
    with pytest.raises(InputError, match="not valid TOML"):
        load_config(_config(tmp_path, "policies = [\n"))
    with pytest.raises(InputError, match=r"is a directory: give the sweep's .toml file \(it "):
        load_config(tmp_path)  # `_config` wrote a .toml there: the message names it


def test_config_builds_every_point(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path))
    specs = cfg.specs()
    order = [(p, load) for p, load, _ in specs]
    assert order == [("mtp1", 1.0), ("mtp1", 3.0), ("dspark", 1.0), ("dspark", 3.0)]
    assert all(s.gamma == 4 and s.rate_scale == load and s.policy == p for p, load, s in specs)
    assert cfg.baseline == "mtp1" and cfg.sla_anchors == (100.0, 1000.0)


# --- executors and the resumable cache ---------------------------------------------------


def _sweep(tmp_path: Path, out: Path, executor: str = "local", jobs: int = 1) -> pd.DataFrame:
    cfg, points = prepare(_config(tmp_path), executor, jobs)
    return run_pareto(cfg, points, out, executor, jobs)


def test_outputs_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    table = _sweep(tmp_path, out)
    for name in ("points.parquet", "frontier.parquet", "pareto.png", "load.png", "report.md"):
        assert (out / name).stat().st_size > 0
    stored = pd.read_parquet(out / "points.parquet")
    pd.testing.assert_frame_equal(stored, table)
    for name in ("points.parquet", "frontier.parquet"):
        assert pq.read_schema(out / name).metadata[SCHEMA_KEY] == str(SCHEMA_VERSION).encode()
    assert list(stored["policy"]) == ["mtp1", "mtp1", "dspark", "dspark"]
    assert (stored["mean_verify_budget"][stored["policy"] == "mtp1"] == 2.0).all()
    for key in stored["point"]:
        assert (out / "points" / key / "requests.parquet").is_file()


def test_an_sla_that_a_policy_ignores_is_warned_before_the_sweep_and_kept_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    assert load_config(_config(tmp_path)).warnings == ()  # no sla_tps: nothing to say
    path = _config(tmp_path, TINY.replace("gamma = 4", "gamma = 4\nsla_tps = 150"))
    out = tmp_path / "out"
    argv = ["dsim", "pareto", "--config", str(path), "--out", str(out), "--no-progress"]
    monkeypatch.setattr(sys, "argv", argv)
    cli.main()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("dsim: warning: --sla-tps 150 has no effect on")
    assert "policy mtp1 " in err[0]  # dspark reads it: only mtp1 is named
    assert f"- warning: {err[0].removeprefix('dsim: warning: ')}" in (out / "report.md").read_text()


def test_kill_and_resume_recomputes_only_unfinished_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sweep.run_point
    calls: list[str] = []

    def crash_after_two(spec, directory):
        if len(calls) == 2:
            raise KeyboardInterrupt  # what a Ctrl-C or a dying worker looks like to the loop
        calls.append(directory)
        return real(spec, directory)

    monkeypatch.setattr(sweep, "run_point", crash_after_two)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        _sweep(tmp_path, out)
    finished = {d: (Path(d) / "summary.json").stat().st_mtime_ns for d in calls}
    assert len(list((out / "points").iterdir())) == 2
    assert not (out / "points.parquet").exists()

    resumed: list[str] = []
    monkeypatch.setattr(sweep, "run_point", lambda s, d: resumed.append(d) or real(s, d))
    table = _sweep(tmp_path, out)
    assert len(resumed) == 2 and not set(resumed) & set(finished)
    assert {d: (Path(d) / "summary.json").stat().st_mtime_ns for d in calls} == finished

    monkeypatch.setattr(sweep, "run_point", real)
    fresh = _sweep(tmp_path, tmp_path / "fresh")
    pd.testing.assert_frame_equal(table, fresh)


def test_key_follows_input_file_contents(tmp_path: Path) -> None:
    profile = tmp_path / "p.csv"
    profile.write_text(Path(PROFILE).read_text())
    spec = replace(load_config(_config(tmp_path)).base, profile=str(profile))
    before = sweep.point_key(spec)
    assert sweep.point_key(replace(spec, seed=1)) != before
    lines = Path(PROFILE).read_text().splitlines()
    col = lines[0].split(",").index("latency_ms")
    cells = lines[1].split(",")
    cells[col] = f"{float(cells[col]) + 1e-3:.6g}"  # one latency changed by 1 microsecond
    profile.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    assert sweep.point_key(spec) != before


def test_process_pool_and_ray_give_identical_numbers(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    local = _sweep(tmp_path, tmp_path / "local", "local", jobs=2)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = _sweep(tmp_path, tmp_path / "ray", "ray", jobs=2)
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(local, on_ray)


# --- frontier math on a hand-made example --------------------------------------------------


def _points() -> pd.DataFrame:
    rows = [  # policy, median tok/s/user, throughput tok/s
        ("base", 100.0, 1000.0),
        ("base", 80.0, 2000.0),
        ("base", 50.0, 3000.0),
        ("base", 40.0, 2500.0),  # dominated: slower and less throughput than (50, 3000)
        ("fast", 200.0, 1000.0),
        ("fast", 150.0, 2000.0),
        ("fast", 100.0, 4000.0),
    ]
    return pd.DataFrame(rows, columns=["policy", "tps_p50", "throughput_tok_s"]).assign(
        load=1.0, point="k"
    )


def test_frontier_drops_dominated_points_and_orders_by_throughput() -> None:
    front = pareto_front(_points())
    base = front[front["policy"] == "base"]
    assert list(base["throughput_tok_s"]) == [1000.0, 2000.0, 3000.0]
    assert list(base["tps_p50"]) == [100.0, 80.0, 50.0]


def test_matched_throughput_interpolation() -> None:
    front = pareto_front(_points())
    assert speed_at_throughput(front, "base", 2500.0) == pytest.approx(65.0)
    assert speed_at_throughput(front, "fast", 3000.0) == pytest.approx(125.0)
    assert math.isnan(speed_at_throughput(front, "base", 3500.0))  # never extrapolate
    gains = matched_gains(front, ["base", "fast"], "base", levels=3)
    assert list(gains["throughput_tok_s"]) == [1000.0, 2000.0, 3000.0]  # overlap 1000..3000
    np.testing.assert_allclose(gains["gain"], [1.0, 150 / 80 - 1, 125 / 50 - 1])


def test_max_throughput_at_sla_and_cannot_meet() -> None:
    front = pareto_front(_points())
    assert throughput_at_sla(front, "base", 90.0) == pytest.approx(1500.0)
    assert throughput_at_sla(front, "base", 10.0) == 3000.0
    assert math.isnan(throughput_at_sla(front, "base", 120.0))
    sla = sla_throughputs(front, ["base", "fast"], "base", [90.0, 120.0, 250.0])
    at = sla.set_index(["sla_tps", "policy"])
    assert at.loc[(90.0, "fast"), "ratio"] == pytest.approx(4000 / 1500)
    assert math.isinf(at.loc[(120.0, "fast"), "ratio"])
    assert math.isnan(at.loc[(250.0, "fast"), "max_throughput_tok_s"])
    text = sla_section(sla, "base")
    assert "| 120 | cannot meet | 3200 (base cannot meet) |" in text
    assert "| 250 | cannot meet | cannot meet |" in text


# --- seeds as a sweep axis -----------------------------------------------------------------


def test_seeds_multiply_the_points(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, TINY.replace("[run]", "seeds = [0, 1, 2]\n[run]")))
    specs = cfg.specs()
    assert len(specs) == 2 * 2 * 3  # policies x loads x seeds
    assert [s.seed for _, _, s in specs[:3]] == [0, 1, 2]
    assert len({sweep.point_key(s) for _, _, s in specs}) == 12
    assert load_config(_config(tmp_path)).seeds == (0,)


def _seeded() -> pd.DataFrame:
    """The hand-made example at seed 0, and at seed 1 with every throughput 10% higher."""
    p = _points()
    return pd.concat(
        [p.assign(seed=0), p.assign(seed=1, throughput_tok_s=p["throughput_tok_s"] * 1.1)],
        ignore_index=True,
    ).assign(load=lambda d: d.groupby(["policy", "seed"]).cumcount().astype(float))


def test_seed_means_and_spread() -> None:
    means = seed_means(_seeded())
    assert len(means) == 7 and (means["seeds"] == 2).all()
    first = means.iloc[0]
    assert first["throughput_tok_s"] == pytest.approx(1050.0)
    assert (first["throughput_tok_s_min"], first["throughput_tok_s_max"]) == (1000.0, 1100.0)
    assert first["tps_p50_min"] == first["tps_p50_max"] == 100.0


def test_gains_are_per_seed_then_averaged() -> None:
    seeded = _seeded()
    fronts = seed_fronts(seeded)
    front = pareto_front(seed_means(seeded))
    gains = matched_gains(front, ["base", "fast"], "base", levels=3, fronts=fronts)
    assert gains["throughput_tok_s"].tolist() == pytest.approx([1100.0, 2050.0, 3000.0])
    g = gains.iloc[1]  # levels span the range every seed's frontiers share: 1100..3000
    per_seed = [speed_at_throughput(f, "fast", 2050) / speed_at_throughput(f, "base", 2050) - 1
                for f in fronts]  # fmt: skip
    assert g["gain"] == pytest.approx(np.mean(per_seed))
    assert (g["gain_min"], g["gain_max"]) == pytest.approx((min(per_seed), max(per_seed)))
    assert g["gain_min"] < g["gain_max"]
    sla = sla_throughputs(front, ["base", "fast"], "base", [90.0], fronts=fronts)
    fast = sla[sla["policy"] == "fast"].iloc[0]
    ratios = [throughput_at_sla(f, "fast", 90) / throughput_at_sla(f, "base", 90) for f in fronts]
    assert fast["ratio"] == pytest.approx(np.mean(ratios))
    assert (fast["ratio_min"], fast["ratio_max"]) == pytest.approx((min(ratios), max(ratios)))


def test_seeded_sweep_reports_mean_and_spread(tmp_path: Path) -> None:
    text = TINY.replace("[run]", "seeds = [0, 1]\n[run]")
    cfg, points = prepare(_config(tmp_path, text), "local", 1)
    out = tmp_path / "out"
    table = run_pareto(cfg, points, out, "local", 1)
    assert len(table) == 8 and sorted(table["seed"].unique()) == [0, 1]
    front = pd.read_parquet(out / "frontier.parquet")
    assert (front["seeds"] == 2).all()
    assert (front["throughput_tok_s_min"] <= front["throughput_tok_s"]).all()
    report = (out / "report.md").read_text()
    assert "mean over 2 seeds" in report and "called only where it exceeds" in report
    ratios = re.findall(
        r"\(x([\d.]+) \[x([\d.]+)\.\.x([\d.]+)\]\)", report.split("## Maximum throughput")[1]
    )
    assert ratios  # each SLA ratio over the baseline carries its min..max over seeds
    assert all(float(lo) <= float(mean) <= float(hi) for mean, lo, hi in ratios)


def test_seed_error_bars_never_go_negative() -> None:
    # Three equal seeds: their mean can land an ulp outside their min..max.
    from dsim.pareto.frontier import X
    from dsim.pareto.plots import _spread

    value = (0.2 + 0.2 + 0.2) / 3
    assert value > 0.2  # the mean of three 0.2s lands an ulp above their max
    front = pd.DataFrame({X: [value, 5.0], f"{X}_min": [0.2, 4.0], f"{X}_max": [0.2, 6.0]})
    low, high = _spread(front, X)
    assert (low >= 0).all() and (high >= 0).all()
    assert high[0] == 0.0 and low[0] < 1e-12 and (low[1], high[1]) == (1.0, 1.0)
