"""STS (and with offsets: sequential Platt), its metrics, the held-out split, `dsim calibrate`."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, logit
from typer.testing import CliRunner

from dsim.acceptance.calibration import (
    apply_temperatures,
    auc,
    ece,
    ece_noise,
    fit_platt,
    fit_sts,
    position_metrics,
    prefix_labels,
    split_by_sequence,
)
from dsim.acceptance.replay import TraceAcceptance
from dsim.acceptance.trace import read_trace_metadata, write_acceptance_trace
from dsim.cli import app
from dsim.errors import InputError

TRUE_T = np.array([2.0, 1.5, 2.5])  # raw logits are TRUE_T times the calibrated ones


def overconfident(rounds: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw confidences sigmoid(T_k * logit(p_k)) and accepted prefixes drawn from the true p."""
    rng = np.random.default_rng(seed)
    p = expit(rng.normal(1.0, 1.2, size=(rounds, len(TRUE_T))))
    accepted = np.cumprod(rng.random(p.shape) < p, axis=1).sum(axis=1)
    seq_id = np.arange(rounds) // 20
    return expit(TRUE_T * logit(p)), accepted, seq_id


def test_sts_recovers_temperature_and_calibrates_held_out():
    conf, accepted, seq_id = overconfident(100_000, seed=0)
    held = split_by_sequence(seq_id, 0.3, seed=0)
    temps = fit_sts(conf[~held], accepted[~held])
    np.testing.assert_allclose(temps, TRUE_T, rtol=0.10)
    metrics = position_metrics(conf[held], accepted[held], temps)
    for m in metrics:
        assert m["ece_before"] > 0.05, m  # the raw confidences really are miscalibrated
        assert m["ece_after"] < 0.02, m
        assert m["brier_after"] < m["brier_before"], m
        assert abs(m["auc_after"] - m["auc_before"]) < 0.01, m
    assert metrics[0]["auc_after"] == pytest.approx(metrics[0]["auc_before"], abs=1e-12)


def test_ece_noise_bounds_a_calibrated_predictor_and_flags_a_miscalibrated_one():
    rng = np.random.default_rng(3)
    pred = expit(rng.normal(-1.0, 1.0, size=400))  # a few hundred rounds, as on held-out traces
    mean, p95 = ece_noise(pred)
    assert 0.02 < mean < p95 < 0.12  # sampling alone gives several percent at this size
    inside = [ece(pred, rng.random(400) < pred) <= p95 for _ in range(400)]
    assert 0.92 <= np.mean(inside) <= 0.98  # the 95th percentile: ~5% of honest draws above
    off = [ece(pred, rng.random(400) < 0.6 * pred) > p95 for _ in range(200)]
    assert np.mean(off) > 0.9  # power: 40% over-confidence is flagged


def test_sts_leaves_calibrated_confidences_alone():
    conf, accepted, _ = overconfident(30_000, seed=1)
    calibrated = expit(logit(conf) / TRUE_T)
    np.testing.assert_allclose(fit_sts(calibrated, accepted), 1.0, rtol=0.10)


def test_platt_removes_a_bias_that_sts_cannot():
    """Raw logits = T_k * true logit + 1 (biased up): the offset recovers -1/T_k, and held-out
    ECE falls under 2% where STS, a temperature alone, stays miscalibrated."""
    conf, accepted, seq_id = overconfident(100_000, seed=4)
    biased = expit(logit(conf) + 1.0)
    held = split_by_sequence(seq_id, 0.3, seed=0)
    temps, offsets = fit_platt(biased[~held], accepted[~held])
    np.testing.assert_allclose(temps, TRUE_T, rtol=0.10)
    np.testing.assert_allclose(offsets, -1.0 / TRUE_T, atol=0.05)
    labels = prefix_labels(accepted, 3)
    platt = np.cumprod(apply_temperatures(biased[held], temps, offsets), axis=1)
    sts = np.cumprod(apply_temperatures(biased[held], fit_sts(biased[~held], accepted[~held])), 1)
    for k in range(3):
        assert ece(platt[:, k], labels[held][:, k]) < 0.02
        assert ece(sts[:, k], labels[held][:, k]) > 0.03


def test_platt_on_calibrated_confidences_is_the_identity():
    conf, accepted, _ = overconfident(30_000, seed=5)
    temps, offsets = fit_platt(expit(logit(conf) / TRUE_T), accepted)
    np.testing.assert_allclose(temps, 1.0, rtol=0.10)
    np.testing.assert_allclose(offsets, 0.0, atol=0.05)


def test_ece_matches_hand_computation_and_grid_form():
    pred = np.array([0.1, 0.1, 0.9, 0.9, 1.0])
    label = np.array([0.0, 1.0, 1.0, 1.0, 1.0])
    # bin 2: |0.2 - 1| ; bin 18: |1.8 - 2| ; bin 19 (p = 1 falls in the last bin): 0
    assert ece(pred, label) == pytest.approx((0.8 + 0.2) / 5)
    grid = np.stack([pred, np.full(5, 0.8), label])
    np.testing.assert_allclose(ece(grid, label), [ece(row, label) for row in grid])
    assert ece(label, label) == 0.0


def test_auc_equals_pairwise_count_with_ties():
    rng = np.random.default_rng(2)
    score = rng.integers(0, 5, 60).astype(float)
    label = (rng.random(60) < 0.4).astype(float)
    pos, neg = score[label == 1], score[label == 0]
    pairwise = ((pos[:, None] > neg) + 0.5 * (pos[:, None] == neg)).mean()
    assert auc(score, label) == pytest.approx(pairwise, abs=1e-12)
    assert np.isnan(auc(score, np.ones(60)))


def test_split_is_deterministic_and_by_whole_sequence():
    seq_id = np.repeat(np.arange(50), 4)
    held = split_by_sequence(seq_id, 0.3, seed=3)
    assert (held == split_by_sequence(seq_id, 0.3, seed=3)).all()
    assert not (held == split_by_sequence(seq_id, 0.3, seed=4)).all()
    assert len(np.unique(seq_id[held])) == 15
    assert not set(seq_id[held]) & set(seq_id[~held])
    assert not split_by_sequence(seq_id, 0.0, seed=3).any()
    with pytest.raises(InputError, match="holdout"):
        split_by_sequence(seq_id, 1.0, seed=3)
    with pytest.raises(InputError, match="2 sequence"):
        split_by_sequence(np.array([1, 1, 2]), 0.1, seed=3)


def test_calibrate_command_writes_report_diagram_and_sidecar(tmp_path):
    conf, accepted, seq_id = overconfident(3_000, seed=4)
    df = pd.DataFrame({"seq_id": seq_id, "round": np.arange(len(seq_id)) % 20, "domain": "x"})
    df["gamma"] = len(TRUE_T)
    df[["conf_1", "conf_2", "conf_3"]] = conf
    df["accepted"] = accepted
    trace = tmp_path / "t.parquet"
    meta = {"target": None, "drafter": None, "dataset": "unit", "temperature": None}
    write_acceptance_trace(df, trace, {**meta, "command": "pytest"})

    out = tmp_path / "cal"
    result = CliRunner().invoke(
        app, ["calibrate", str(trace), "--out", str(out), "--write-sidecar"]
    )
    assert result.exit_code == 0, result.output
    assert "ECE" in result.output and "held-out" in result.output
    report = json.loads((out / "calibration.json").read_text())
    assert report["split"]["metrics_on"] == "held-out" and report["split"]["report_sequences"] == 45
    assert [m["position"] for m in report["metrics"]] == [1, 2, 3]
    assert (out / "reliability.png").read_bytes()[:4] == b"\x89PNG"
    stored = read_trace_metadata(trace)["calibration"]
    assert stored["temperatures"] == report["temperatures"]
    assert TraceAcceptance(trace, 3).calibration_source == "sidecar"
