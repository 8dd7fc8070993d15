"""Layout sweeps' pictures (issue 52, item 2): a marker per layout, the layout beside its
series, legends beside the axes, and a gain panel that is never empty when layouts can be
compared (a single-policy sweep: each layout's gain over the first layout)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from dsim.pareto import plots
from dsim.pareto.pipeline import prepare, run_pareto

SWEEP = """
policies = ["dspark"]
[run]
trace = "synthetic:rate=4,duration=20,prompt=64,output=64"
profile = "{profile}"
gamma = 4
[layout]
replicas = [1, 2]
[load]
rate_scale = [1, 2, 4]
[sla]
anchors = [40]
"""


def linear_profile(folder: Path) -> Path:
    """10 ms + 0.5 ms a token: a step slows as its batch grows, so per-user speed falls with
    load and each layout's frontier spans its loads (two replicas split the batch)."""
    b = [1, 8, 64, 512, 4096]
    path = folder / "linear.csv"
    frame = pd.DataFrame(
        {"batch_tokens": b, "context_len": 0, "latency_ms": [10 + 0.5 * x for x in b]}
    )
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def figures(monkeypatch):
    """The figures the sweep saves, kept open for the test."""
    kept = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: kept.append(fig))
    yield kept
    for fig in kept:
        plt.close(fig)


def test_a_single_policy_layout_sweep_shows_its_layouts(tmp_path: Path, figures) -> None:
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(profile=linear_profile(tmp_path)))
    cfg, points = prepare(config, "local", 1)
    run_pareto(cfg, points, tmp_path / "out", "local", 1)
    fig = figures[0]
    top, low = fig.axes
    lines = {line.get_label(): line for line in top.get_lines()}
    marks = {lines[f"dspark | replicas {r}"].get_marker() for r in (1, 2)}
    assert len(marks) == 2
    labels = sorted(t.get_text() for t in top.texts if "replicas" in t.get_text())
    assert labels == ["replicas 1", "replicas 2"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = top.get_legend().get_window_extent(renderer)
    assert legend.x0 >= top.get_window_extent(renderer).x1  # off the data
    gains = [line for line in low.get_lines() if not line.get_label().startswith("_")]
    assert gains and "replicas 1" in low.get_ylabel()
    assert gains[0].get_marker() == lines["dspark | replicas 2"].get_marker()


def test_layout_gains_read_matched_throughputs() -> None:
    """Two straight frontiers: at throughput T the baseline layout runs 300 - T/10 tok/s/user
    and the other 330 - T/10, so its gain is 30 / (300 - T/10) at each level."""
    rows = []
    for layout, offset in (("a", 300.0), ("b", 330.0)):
        for t in (1000.0, 2000.0):
            rows.append({"policy": "p", "layout": layout, "tps_p50": offset - t / 10,
                         "throughput_tok_s": t})  # fmt: skip
    gains = plots.layout_gains(pd.DataFrame(rows), "a", levels=3)
    assert list(gains["layout"]) == ["b"] * 3
    expected = 30 / (300 - gains["throughput_tok_s"].to_numpy() / 10)
    assert np.allclose(gains["gain"], expected)
