"""The light ranking's bias, split between the prompt split and the model (a read-back, judging
nothing).

A study's simulations replay the trace half (even rows of the prompt file) while real mode
serves the served half (odd rows): a held-out split, so the two halves' acceptance differs by
sampling, the same way in every study (one split). This replays each light-load run of the
given studies twice, DRAWS acceptance draws each, on its own workload, profiles and speed
trace: on the study's trace half, and on the same trace's served half (the prompts the real
runs served; other samples of them, the trace being recorded at temperature 1). What the
served half removes from an error is the split's; what stays is the model's.
Usage, from the folder holding experiments/validation/STUDY/runs (trimmed studies come back
from the history, e.g. `git archive f026812 experiments/validation/v42 | tar -x -C /tmp/rb`):
python experiments/validation/halves_readback.py TRACE STUDY [STUDY ...]
(TRACE: the acceptance trace the studies split, traces/acceptance/smollm2-markov.parquet.)
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

from dsim.acceptance.trace import read_acceptance_trace
from dsim.validation.plan import trace_half, write_trace_half
from dsim.validation.runs import KeptRun, run_name, simulate_draws

DRAWS = 32
POLICIES = ("mtp1", "fixed:4", "dspark")


def served_half(trace: Path, out: Path) -> None:
    """The trace's rows on the served half (odd rows) of its prompt file, as a trace of its
    own."""
    prompts = Path(read_acceptance_trace(trace)[1]["dataset"])
    n_prompts = len(prompts.read_text().splitlines())
    rows, meta = trace_half(trace, prompts, n_prompts, served=True)
    write_trace_half(rows, meta, trace, out, served=True)


def main(trace: Path, studies: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        served = Path(tmp) / "served-half.parquet"
        served_half(trace, served)
        rows = []
        for study in studies:
            for folder in sorted(Path(f"experiments/validation/{study}/runs/light").glob("s?")):
                for policy in POLICIES:
                    kept = KeptRun.read(folder, policy)
                    real = folder / f"{run_name(policy)}-real" / "summary.json"
                    row = {"study": study, "seed": folder.name, "policy": policy}
                    row["real"] = float(json.loads(real.read_text())["tpot_p50_s"])
                    for half, spec in (
                        ("trace half", kept.spec),
                        ("served half", replace(kept.spec, acceptance=str(served))),
                    ):
                        _, draws = simulate_draws(spec, kept.work, kept.speed, DRAWS)
                        row[half] = float(draws["tpot_p50_s"].mean())
                    rows.append(row)
    t = pd.DataFrame(rows)
    print(f"light load, {len(t) // len(POLICIES)} runs of {', '.join(studies)}; {DRAWS} draws")
    print("TPOT p50 error (simulated mean of the draws / real - 1), mean and sd over runs:")
    for half in ("trace half", "served half"):
        t[half + " error"] = t[half] / t["real"] - 1
    cols = ["trace half error", "served half error"]
    print(t.groupby("policy")[cols].agg(["mean", "std"]).round(4).to_string())
    print("dspark's TPOT p50 over fixed:4's - 1 (the light ranking's pair), per study:")
    gaps = {}
    for kind in ("real", "trace half", "served half"):
        w = t.pivot_table(index=["study", "seed"], columns="policy", values=kind)
        gap = w["dspark"] / w["fixed:4"] - 1
        gaps[kind] = gap.groupby(level="study").mean()
        gaps[kind]["all"] = gap.mean()
    print(pd.DataFrame(gaps).round(4).to_string())


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
