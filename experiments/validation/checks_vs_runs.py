"""How well each check predicts the pass factor of the runs beside it, from a report's own files.

The study prices a triple's runs with a pass factor k taken from bursts (the calibration, moved
by the check before it). Afterwards the runs' own factor can be read back: their time inside
the model passes over the raw profiles' prediction for their own steps (target and drafter).
This script puts the two side by side per triple, with what the check before alone, the check
after alone and their mean would have priced, so a pricing rule can be judged on past reports
before a new one is committed (it never feeds back into a report). For reports priced by
reference passes (v20 on) it sets each run's own factor beside its reference-priced k and the
calibration's k alone.

The raw prediction of a run comes from its `steps.csv`: predicted_s = k x raw + o, where o is
the calibration's overhead a + b R + c V (`EngineCalibration.step_overheads`, as the fit counts
it), so raw = (predicted_s - o) / k.

    .venv/bin/python experiments/validation/checks_vs_runs.py experiments/validation/v26 ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from dsim.report import markdown_table
from dsim.validation.step_check import EngineCalibration


def real_steps(folder: Path, policy: str) -> pd.DataFrame:
    return pd.read_csv(folder / f"{policy.replace(':', '')}-real" / "steps.csv")


def run_factor(
    steps: pd.DataFrame, run: dict, k: float, engine: dict
) -> tuple[float, float, float]:
    """(time in the passes, raw predicted pass time, the same times each step's speed) of one
    real run. Reports priced by a speed trace (v22 on) keep each step's speed in steps.csv:
    predicted_s = (k x raw + o) x speed there."""
    speed = steps.get("speed", 1.0)
    overhead = EngineCalibration(**engine).step_overheads(steps)
    raw = (steps["predicted_s"] / speed - overhead) / k
    return run["passes_wall_s"], float(raw.sum()), float((raw * speed).sum())


def _drift_records(report: Path) -> list[dict]:
    return json.loads((report / "comparison.json").read_text())["machine_drift"]["triples"]


def triples(report: Path) -> pd.DataFrame:
    """One row per triple attempt: priced k, checks, and the runs' own factor."""
    engine = json.loads((report / "calibration" / "engine.json").read_text())
    runs = json.loads((report / "diagnostics.json").read_text())["runs"]
    drift = _drift_records(report)
    rows = []
    for t in drift:
        name = f"s{t['seed']}{'-rerun' * (t['attempt'] - 1)}"
        folder = f"runs/{t['load']}/{name}"
        mine = [r for r in runs if r["folder"] == folder]
        if not mine:  # a drifted attempt that was not kept: its runs are not in diagnostics
            continue
        k = t["pass_factor"]
        parts = [run_factor(real_steps(report / folder, r["policy"]), r, k, engine) for r in mine]
        factor = sum(p for p, _, _ in parts) / sum(q for _, q, _ in parts)
        before, after = t["before"]["wall"], t["after"]["wall"]
        rows.append({
            "report": report.name, "load": t["load"], "seed": t["seed"], "attempt": t["attempt"],
            "runs": factor, "priced": t["pass_factor"] / factor - 1,
            "before": before / factor - 1, "after": after / factor - 1,
            "mean": (before + after) / 2 / factor - 1,
        })  # fmt: skip
    return pd.DataFrame(rows)


def reference_runs(report: Path) -> pd.DataFrame:
    """Reports priced by reference passes (v20 on): one row per kept run, its own factor, the
    error of the factor its report priced it with (v22 on: the calibration's k times its speed
    trace, weighted by the steps' raw pass time; v20-v21: its median k), of its median k (one
    factor per run) and of the calibration's k alone (no tracking)."""
    engine = json.loads((report / "calibration" / "engine.json").read_text())
    rows = []
    for r in json.loads((report / "diagnostics.json").read_text())["runs"]:
        steps = real_steps(report / r["folder"], r["policy"])
        k = engine["pass_factor"] if "speed" in steps else r["pass_factor"]
        passes, raw, sped = run_factor(steps, r, k, engine)
        factor = passes / raw
        rows.append({
            "report": report.name, "load": r["load"], "seed": r["seed"], "policy": r["policy"],
            "runs": factor, "reference": k * sped / raw / factor - 1,
            "median": r["pass_factor"] / factor - 1,
            "calibration": engine["pass_factor"] / factor - 1,
            "drift": r["reference"]["drift"],
        })  # fmt: skip
    return pd.DataFrame(rows)


def _refuse(message: str) -> None:
    """One line on stderr, exit 2: the arguments are the input."""
    print(message, file=sys.stderr)
    sys.exit(2)


def main() -> None:
    reports = [Path(arg) for arg in sys.argv[1:]]
    if not reports:
        _refuse("usage: checks_vs_runs.py REPORT_FOLDER ... (e.g. experiments/validation/v26)")
    for report in reports:
        if not (report / "comparison.json").is_file():
            _refuse(f"{report}: not a validation report (no comparison.json)")
        if not (report / "runs").is_dir():
            _refuse(f"{report}: no runs/ (reports before v22 lost theirs to .gitignore)")
    by_reference = ["runs" in _drift_records(r)[0] for r in reports]
    if any(by_reference) and not all(by_reference):
        _refuse("give reports of one kind: checks beside triples (v17-v19) or references (v20-)")
    reader, cols = (
        (reference_runs, ["reference", "median", "calibration"])
        if all(by_reference)
        else (triples, ["priced", "before", "after", "mean"])
    )
    table = pd.concat([reader(r) for r in reports], ignore_index=True)
    shown = table.copy()
    shown["runs"] = shown["runs"].map("{:.3f}".format)
    for c in [*cols, "drift"] if "drift" in shown else cols:
        shown[c] = shown[c].map("{:+.1%}".format)
    print(markdown_table(list(shown.columns), shown.astype(str).values.tolist()))
    print("\nmean |error| of each rule (the runs' own factor as truth):")
    print(table[cols].abs().mean().map("{:.1%}".format).to_string())


if __name__ == "__main__":
    main()
