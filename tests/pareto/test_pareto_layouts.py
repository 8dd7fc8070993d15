"""dsim pareto's exclusions (unstable, TTFT bounds), the best-fixed baseline, [layout] axes,
the window check on the load axis and the plots' names, colours and labels."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from dsim.errors import InputError
from dsim.pareto import sweep
from dsim.pareto.analysis import analyse
from dsim.pareto.config import load_config
from dsim.pareto.exclusion import exclusions
from dsim.pareto.frontier import (
    baseline_sla,
    baseline_speed,
    matched_gains,
    pareto_front,
    sla_throughputs,
)
from dsim.pareto.pipeline import prepare, run_pareto
from dsim.pareto.plots import _plot_envelope, _sla_labels, display_name, policy_color
from dsim.sla import read as read_sla

PROFILE = str(ROOT / "profiles/h200-qwen3-8b-roofline.csv")
BASE = f"""
policies = ["fixed:1", "fixed:3", "dspark"]
baseline = "best-fixed"
[run]
trace = "synthetic:rate=4,duration=8,prompt=200,output=48"
profile = "{PROFILE}"
gamma = 4
[load]
rate_scale = [1, 3]
[sla]
anchors = [100]
"""


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["policy", "tps_p50", "throughput_tok_s"]).assign(
        load=lambda d: d.groupby("policy").cumcount().astype(float), point="k"
    )


# --- best-fixed: the upper envelope of the fixed:K frontiers ---------------------------------

# fixed:1 is faster at low throughput, fixed:3 at high: their frontiers cross at 2000 tok/s
CROSSING = [
    ("fixed:1", 200.0, 1000.0),
    ("fixed:1", 100.0, 3000.0),
    ("fixed:3", 150.0, 1000.0),
    ("fixed:3", 130.0, 3000.0),
    ("dspark", 210.0, 1000.0),
    ("dspark", 140.0, 3000.0),
]


def test_best_fixed_is_the_upper_envelope_at_matched_throughput() -> None:
    front = pareto_front(_frame(CROSSING))
    members = ("fixed:1", "fixed:3")
    # fixed:1: 200 - 0.05 (y - 1000); fixed:3: 150 - 0.01 (y - 1000); equal at y = 2250
    assert baseline_speed(front, members, 1500.0) == pytest.approx(175.0)  # fixed:1's
    assert baseline_speed(front, members, 2750.0) == pytest.approx(132.5)  # fixed:3's
    gains = matched_gains(front, ["fixed:1", "fixed:3", "dspark"], "best-fixed", 5, None, members)
    assert list(gains["policy"].unique()) == ["dspark"]  # the members are the baseline
    envelope = [max(200 - 0.05 * (y - 1000), 150 - 0.01 * (y - 1000)) for y in
                gains["throughput_tok_s"]]  # fmt: skip
    np.testing.assert_allclose(gains["baseline_tps_p50"], envelope)
    dspark = 210 - 0.035 * (gains["throughput_tok_s"] - 1000)
    np.testing.assert_allclose(gains["gain"], dspark / envelope - 1)


def test_best_fixed_at_an_sla_is_its_best_member() -> None:
    front = pareto_front(_frame(CROSSING))
    members = ("fixed:1", "fixed:3")
    # at 140 tok/s/user: fixed:1 reaches 1000 + 60/0.05 = 2200, fixed:3 1000 + 10/0.01 = 2000
    assert baseline_sla(front, members, 140.0) == pytest.approx(2200.0)
    # at 135: fixed:1 2300, fixed:3 2500
    assert baseline_sla(front, members, 135.0) == pytest.approx(2500.0)
    sla = sla_throughputs(front, ["fixed:1", "fixed:3", "dspark"], "best-fixed", [135.0],
                          members=members).set_index("policy")  # fmt: skip
    assert sla.loc["best-fixed", "max_throughput_tok_s"] == pytest.approx(2500.0)
    assert sla.loc["fixed:1", "ratio"] == pytest.approx(2300.0 / 2500.0)
    # dspark: 210 - 0.035 (y - 1000) = 135 at y = 3142.9, past its range: its top, 3000
    assert sla.loc["dspark", "ratio"] == pytest.approx(3000.0 / 2500.0)


def test_best_fixed_needs_a_fixed_policy(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="best-fixed needs at least one fixed:K"):
        load_config(_config(tmp_path, BASE.replace('"fixed:1", "fixed:3", ', "")))
    assert load_config(_config(tmp_path, BASE)).baseline_members == ("fixed:1", "fixed:3")


# --- exclusions: unstable points and TTFT bounds -------------------------------------------


def _with_ttft() -> pd.DataFrame:
    points = _frame(CROSSING).assign(unstable=False, ttft_p50_s=0.1, ttft_p99_s=0.5, seed=0)
    points.loc[5, "ttft_p99_s"] = 12.0  # dspark's heavy point: past a 10 s p99 bound
    return points.assign(layout="")


def test_a_point_past_the_ttft_bound_is_never_an_anchor_or_a_gain(tmp_path: Path) -> None:
    points = _with_ttft()
    reasons = exclusions(points, read_sla([("ttft_p99_s", 10.0)]))
    assert list(reasons) == ["", "", "", "", "", "ttft_p99_s > 10"]
    cfg = load_config(
        _config(tmp_path, BASE.replace("anchors = [100]", "anchors = [120]\nttft_p99_s = 10"))
    )
    result = analyse(cfg, points)
    assert list(points["excluded"]) == list(reasons)
    # without its heavy point, dspark's frontier is the one at 1000 tok/s: at 120 tok/s/user
    # its maximum is 1000, not the 1000 + 90/0.035 = 3571 -> 3000 the excluded point gave
    sla = result.sla.set_index("policy")
    assert sla.loc["dspark", "max_throughput_tok_s"] == pytest.approx(1000.0)
    assert result.front[result.front["policy"] == "dspark"]["throughput_tok_s"].tolist() == [1000.0]
    # and no gain is read where only the excluded point reached
    assert result.gains.dropna(subset=["gain"])["throughput_tok_s"].max() <= 1000.0


def test_unstable_in_one_seed_is_excluded_in_every_seed() -> None:
    points = pd.concat([_with_ttft().assign(seed=s) for s in (0, 1)], ignore_index=True)
    points.loc[6, "unstable"] = True  # seed 1's fixed:1 at load 0
    reasons = exclusions(points, read_sla([]))
    assert reasons[0] == reasons[6] == "unstable"
    assert (reasons.drop([0, 6]) == "").all()


# --- [layout] axes -----------------------------------------------------------------------

LAYOUT = BASE.replace("[load]", '[layout]\ndisagg = ["1:1", "2:2", "off"]\n[load]')


def test_layout_axes_cross_with_the_load_axis_and_enter_the_keys(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, LAYOUT))
    specs = cfg.specs()
    assert len(specs) == 3 * 3 * 2  # policies x layouts x loads
    combos = [(s.policy, s.disagg, s.rate_scale) for _, _, s in specs[:6]]
    assert combos == [("fixed:1", d, r) for d in ("1:1", "2:2", None) for r in (1.0, 3.0)]
    assert [cfg.layout_of(s) for _, _, s in specs[:6:2]] == [
        "disagg 1:1",
        "disagg 2:2",
        "disagg off",
    ]
    assert len({sweep.point_key(s) for _, _, s in specs}) == len(specs)
    other = PROFILE.replace("qwen3-8b-roofline", "qwen3-30b-a3b-roofline")
    both = LAYOUT.replace(f'profile = "{PROFILE}"\n', "").replace(
        '"off"]', f'"off"]\nprofile = ["{PROFILE}", "{other}"]'
    )
    crossed = load_config(_config(tmp_path, both))
    assert len(crossed.layouts) == 6
    assert crossed.layouts[1].label == "disagg 1:1, profile h200-qwen3-30b-a3b-roofline"
    keys = {sweep.point_key(s) for _, _, s in crossed.specs()}
    # the same spec is the same point (its cached result is reused); the other profile's new
    earlier = {sweep.point_key(s) for _, _, s in specs}
    assert len(keys) == 3 * 6 * 2 and earlier <= keys and len(keys - earlier) == 3 * 3 * 2


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("gamma = 4", "gamma = 4\ndisagg = '1:1'"), "run.disagg: is a layout axis"),
        (("[load]", "replicas = [1, 2]\n[load]"), "layout: set disagg or replicas, not both"),
        (("rate_scale = [1, 3]", "replicas = [1, 3]"), "layout.disagg: replaces replicas, the"),
        (('disagg = ["1:1", "2:2", "off"]', "replicas = []"), "layout.replicas: expected a non-e"),
        (('"2:2"', '"2:x"'), "layout: --disagg '2:x'"),
        (('"2:2"', '"1:1"'), "layout.disagg: lists a value twice"),
        (("[load]", "colour = [1]\n[load]"), "layout.colour: unknown key"),
    ],
)
def test_bad_layouts_are_one_line_errors(tmp_path: Path, edit, message) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        load_config(_config(tmp_path, LAYOUT.replace(*edit, 1)))


def test_a_layout_sweep_reports_per_layout_and_per_gpu(tmp_path: Path) -> None:
    text = LAYOUT.replace('"1:1", "2:2", "off"', '"1:1", "off"').replace(
        '"fixed:1", "fixed:3", "dspark"', '"fixed:2", "dspark"'
    )
    cfg, points = prepare(_config(tmp_path, text), "local", 1)
    table = run_pareto(cfg, points, tmp_path / "out", "local", 1)
    assert list(table["layout"].unique()) == ["disagg 1:1", "disagg off"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "### disagg 1:1" in report and "### disagg off" in report
    per_gpu = report.split("per GPU at each SLA anchor")[1].split("## All points")[0]
    rows = {tuple(c.strip() for c in line.split("|")[1:4]) for line in per_gpu.splitlines()[4:]}
    assert ("disagg 1:1", "dspark", "2") in rows and ("disagg off", "best-fixed", "1") in rows
    assert "KV budget the profile's (its sidecar's `memory.kv_capacity_tokens`)" in report
    front = pd.read_parquet(tmp_path / "out" / "frontier.parquet")
    assert set(front["layout"]) == {"disagg 1:1", "disagg off"}


# --- [layout] bundles: each profile with its own drafter cost ------------------------------

ROOT = Path(PROFILE).parent
EAGLE3 = str(ROOT / "h200-qwen3-8b-eagle3-roofline.csv")  # priced beside qwen3-8b, h200, tp1
DEEPSEEK = str(ROOT / "h200x8-deepseek-v3-fp8-roofline.csv")  # deepseek-v3, h200, tp8
MTP = str(ROOT / "h200x8-deepseek-v3-fp8-mtp-roofline.csv")  # priced beside DEEPSEEK


def _bundles(entries: str, draft_cost: str = EAGLE3) -> str:
    return BASE.replace(f'profile = "{PROFILE}"', f'draft_cost = "{draft_cost}"').replace(
        "[load]", f"[layout]\nprofile = [{entries}]\n[load]"
    )


def test_a_drafter_priced_for_another_target_is_refused_in_one_line(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """A layout naming only a profile takes run.draft_cost; a drafter profile whose sidecar
    names another model/GPU/TP than that profile's is one line naming both files and the
    bundle that fixes it, exit 2, nothing written."""
    from conftest import run_cli

    config = _config(tmp_path, _bundles(f'"{PROFILE}", "{DEEPSEEK}"'))
    out = tmp_path / "out"
    code, _, err = run_cli(monkeypatch, capsys, "pareto", "--config", str(config),
                           "--out", str(out), "--no-progress")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and not out.exists(), err
    assert "layout.profile: drafter profile" in err and "differ in model, tp" in err
    assert (
        "h200-qwen3-8b-eagle3-roofline.json" in err and "h200x8-deepseek-v3-fp8-roofline.js" in err
    )
    assert f'profile = [{{ profile = "{DEEPSEEK}", draft_cost = "DRAFTER.csv" }}' in err
    # the same drafter in [run] beside the other target alone: refused under run.draft_cost
    alone = BASE.replace(PROFILE, DEEPSEEK).replace("[run]", f'[run]\ndraft_cost = "{EAGLE3}"')
    with pytest.raises(InputError, match=r"run.draft_cost: drafter profile .* differ in model"):
        load_config(_config(tmp_path, alone))
    # a bundle that pairs mismatched files itself is refused too
    crossed = _bundles(f'{{ profile = "{PROFILE}", draft_cost = "{MTP}" }}')
    with pytest.raises(InputError, match=r"layout.profile: drafter profile .*mtp-roofline.csv"):
        load_config(_config(tmp_path, crossed))


def test_a_layout_bundle_carries_its_own_drafter_and_enters_the_key(tmp_path: Path) -> None:
    text = _bundles(f'"{PROFILE}", {{ profile = "{DEEPSEEK}", draft_cost = "{MTP}", '
                    'drafter_kind = "ar" }')  # fmt: skip
    cfg = load_config(_config(tmp_path, text))
    assert [lay.label for lay in cfg.layouts] == [
        "profile h200-qwen3-8b-roofline",
        "profile h200x8-deepseek-v3-fp8-roofline, draft h200x8-deepseek-v3-fp8-mtp-roofline, "
        "kind ar",
    ]
    runs = {(s.profile, s.draft_cost, s.drafter_kind, cfg.layout_of(s)) for _, _, s in cfg.specs()}
    assert runs == {
        (PROFILE, EAGLE3, "auto", cfg.layouts[0].label),
        (DEEPSEEK, MTP, "ar", cfg.layouts[1].label),
    }
    # a changed drafter is a new point: another file, or the same path with other contents
    spec = cfg.specs()[0][2]
    drafter = tmp_path / "drafter.csv"
    drafter.write_bytes(Path(EAGLE3).read_bytes())
    drafter.with_suffix(".json").write_bytes(Path(EAGLE3).with_suffix(".json").read_bytes())
    mine = replace(spec, draft_cost=str(drafter))
    keys = {sweep.point_key(spec), sweep.point_key(mine)}
    prices = pd.read_csv(drafter)
    prices.loc[0, "latency_ms"] += 0.001  # one price
    prices.to_csv(drafter, index=False)
    keys.add(sweep.point_key(mine))
    keys.add(sweep.point_key(replace(mine, drafter_kind="ar")))
    assert len(keys) == 4


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('{ draft_cost = "ratio:0.1" }', "layout.profile: a { ... } entry needs profile"),
        (f'{{ profile = "{PROFILE}", colour = 1 }}', "layout.profile.colour: unknown key"),
        (f'{{ profile = "{PROFILE}", draft_cost = 0.1 }}', "layout.profile: expected a non-empty"),
        (f'"{PROFILE}", {{ profile = "{PROFILE}" }}', "layout.profile: lists a value twice"),
    ],
)
def test_bad_bundles_are_one_line_errors(tmp_path: Path, entry, message) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("{", r"\{")):
        load_config(_config(tmp_path, _bundles(entry, "ratio:0.1")))


# --- the window on the load axis --------------------------------------------------------


def test_a_window_past_the_trace_at_the_highest_load_fails_before_any_work(tmp_path: Path) -> None:
    ok = BASE.replace("gamma = 4", 'gamma = 4\nwindow = "0:2"')  # 8 s / 3 = 2.67 s: inside
    assert load_config(_config(tmp_path, ok)).base.window == "0:2"
    bad = BASE.replace("gamma = 4", 'gamma = 4\nwindow = "0:3"')
    with pytest.raises(InputError, match=r"run.trace: .*ends past the trace's end.*rate scale 3"):
        load_config(_config(tmp_path, bad))
    wrap = bad.replace('window = "0:3"', 'window = "0:3"\nwindow_wrap = true')
    assert load_config(_config(tmp_path, wrap)).base.window_wrap


# --- plots: names, colours, SLA labels ---------------------------------------------------


def test_legend_names_and_colours_are_stable() -> None:
    assert display_name("plugins/x/my_policy.py:GreedyLen") == "GreedyLen"
    assert display_name("mypkg.policies:Tuned") == "Tuned"
    assert display_name("fixed:3") == "fixed:3" and display_name("dspark") == "dspark"
    assert policy_color("dspark") == plt.get_cmap("tab10")(1)  # whatever else is swept
    assert policy_color("a/b.py:GreedyLen") == policy_color("c/d.py:GreedyLen")
    shades = [policy_color(f"fixed:{k}") for k in (1, 3, 5)]
    assert len(set(shades)) == 3 and policy_color("mtp1") not in shades


def test_sla_labels_do_not_overlap() -> None:
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.plot([50, 500], [0, 1])
    ax.set_xscale("log")
    anchors = [100, 103, 106, 110, 300]
    _sla_labels(ax, anchors)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == len(anchors)
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (anchors[i], anchors[j])
    plt.close(fig)
    assert math.isfinite(boxes[0].x0)


def test_best_fixed_envelope_is_drawn_at_the_matched_levels() -> None:
    """One line per layout through (baseline speed, matched throughput), each level once even
    when several policies were compared there, in throughput order, NaN levels left out."""
    gains = pd.DataFrame(
        {
            "layout": ["", "", "", "", ""],
            "policy": ["dspark", "dspark", "mtp1", "mtp1", "mtp1"],
            "throughput_tok_s": [2000.0, 1000.0, 1000.0, 2000.0, 3000.0],
            "baseline_tps_p50": [200.0, 300.0, 300.0, 200.0, np.nan],
        }
    )
    fig, ax = plt.subplots()
    _plot_envelope(ax, gains, {"": "-"})
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [300.0, 200.0] and list(line.get_ydata()) == [1000.0, 2000.0]
    assert line.get_label() == "best-fixed (envelope)" and line.get_color() == policy_color(
        "best-fixed"
    )
    plt.close(fig)
