"""dspark's decode steps at the light load, real beside simulated (a read-back, judging nothing).

For every light-load dspark run of the given studies (runs still in their folders: extract a
trimmed study from the git history, e.g. `git archive f026812 experiments/validation/v42 | tar
-x -C /tmp/rb`), the real run's decode steps (steps.csv) and its trace-driven simulation's under
DRAWS acceptance draws (`dsim.validation.runs.simulate_draws`, on the run's own workload,
profiles and speed trace), grouped by shape (sequences, tokens): steps and seconds per run. A
cell's step count says how often each side verified that many drafts; the seconds what the
shape cost.
Usage, from the folder holding experiments/validation/STUDY/runs:
python experiments/validation/dspark_light_steps.py STUDY [STUDY ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from dsim.validation.runs import KeptRun, simulate_draws

DRAWS = 8
SHAPE = ["num_running", "batch_tokens"]


def per_run(frames: list[pd.DataFrame], seconds: str) -> pd.DataFrame:
    """Decode steps and their seconds per shape, per run (the mean over `frames`)."""
    steps = pd.concat(frames)
    steps = steps[steps["prefill_tokens"] == 0]
    cells = steps.groupby(SHAPE).agg(steps=(seconds, "size"), seconds=(seconds, "sum"))
    return cells / len(frames)


def main(studies: list[str]) -> None:
    real, sim = [], []
    for study in studies:
        for folder in sorted(Path(f"experiments/validation/{study}/runs/light").glob("s?")):
            kept = KeptRun.read(folder, "dspark")
            runs, _ = simulate_draws(kept.spec, kept.work, kept.speed, DRAWS)
            cols = (*SHAPE, "prefill_tokens", "latency_s")
            sim += [pd.DataFrame({c: getattr(run.steps, c) for c in cols}) for run in runs]
            real.append(pd.read_csv(folder / "dspark-real" / "steps.csv"))
    r, s = per_run(real, "real_s"), per_run(sim, "latency_s")
    table = pd.concat({"real": r, "simulated": s}, axis=1).fillna(0)
    table = table[(table[("real", "seconds")] > 0.1) | (table[("simulated", "seconds")] > 0.1)]
    print(f"dspark, light load, {len(real)} runs of {', '.join(studies)}; {DRAWS} draws each")
    print(table.round(2).to_string())
    print("all shapes:", table.sum().round(2).to_dict())


if __name__ == "__main__":
    main(sys.argv[1:])
