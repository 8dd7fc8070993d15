"""`dsim calibrate`: fit STS on part of an acceptance trace, report on the rest, write results.

Kept apart from `calibration.py` (the method and its metrics) so that the reliability plots,
which use those metrics, and the method never import each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dsim.acceptance.calibration import N_BINS, fit_sts, position_metrics, split_by_sequence
from dsim.acceptance.reliability import plot_reliability
from dsim.acceptance.trace import (
    conf_columns,
    read_acceptance_trace,
    trace_gamma,
    update_trace_metadata,
)
from dsim.fileio import atomic_dir, check_replaced_dir, write_json

FILES = ("calibration.json", "reliability.png")  # what a calibration folder holds
FORMAT = "dsim-calibration"  # calibration.json's `format`: dsim's mark on it (`dsim_wrote`)


def calibrate_trace(
    trace: str | Path,
    out_dir: str | Path,
    holdout: float = 0.3,
    seed: int = 0,
    write_sidecar: bool = False,
) -> dict[str, Any]:
    """Fit STS on one part of the trace's sequences, report on the rest, write the results.

    Writes out_dir/calibration.json and out_dir/reliability.png (together, atomically); with
    `write_sidecar` the same calibration object goes under the trace sidecar's "calibration".
    """
    report_file, figure_file = FILES
    check_replaced_dir(out_dir, report_file, FILES, reads=(trace,))  # before the fit
    df, _ = read_acceptance_trace(trace)
    gamma = trace_gamma(df)
    conf = df[conf_columns(gamma)].to_numpy(np.float64)
    accepted = df["accepted"].to_numpy(np.int64)
    seq_id = df["seq_id"].to_numpy()
    held = split_by_sequence(seq_id, holdout, seed, trace)
    fit = ~held
    report_on = held if held.any() else fit
    temps = fit_sts(conf[fit], accepted[fit])
    report = {
        "method": "sequential temperature scaling",
        "temperatures": temps.tolist(),
        "gamma": gamma,
        "ece_bins": N_BINS,
        "split": {
            "seed": seed,
            "holdout": holdout,
            "fit_sequences": len(np.unique(seq_id[fit])),
            "fit_rounds": int(fit.sum()),
            "report_sequences": len(np.unique(seq_id[report_on])),
            "report_rounds": int(report_on.sum()),
            "metrics_on": "held-out" if held.any() else "in-sample",
        },
        "metrics": position_metrics(conf[report_on], accepted[report_on], temps),
    }
    with atomic_dir(out_dir, report_file, FILES) as tmp:
        write_json(tmp / report_file, {"format": FORMAT, "trace": str(trace), **report})
        plot_reliability(conf[report_on], accepted[report_on], temps, tmp / figure_file)
    if write_sidecar:
        update_trace_metadata(trace, {"calibration": report})
    return report
