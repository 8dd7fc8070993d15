"""Per-user speed and throughput of every policy at three concurrency levels (issue 3).

H200 estimate of Qwen3-8B; chat and code presets and our markov drafter's measured trace
(gamma 7); the first 1,000 requests of the Azure conv trace arriving 8x faster than recorded,
so a queue always waits and the concurrency cap (--max-seqs 4 / 32 / 256) sets the load. Then
the cost of miscalibration: dspark on an over-confident drafter's trace, raw vs after STS.
Every cell is run with each of SEEDS; results.md shows the mean over seeds and its min..max,
and a difference between two policies is called only where their min..max ranges do not
overlap.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dsim.report import frame_table
from dsim.run import RunSpec, simulate

HERE = Path(__file__).parent
POLICIES = [
    "ar",
    "mtp1",
    "fixed:3",
    "fixed:7",
    "threshold:0.5",
    "goodput",
    "dspark",
    "dspark-async",
    "oracle",
]
LOADS = {"light": 4, "moderate": 32, "heavy": 256}
# Acceptance per domain: the paper's presets, and the measured trace of our markov drafter
# (dsim-drafter/2 on SmolLM2-135M, held-out prompts, temperature 1) with its STS calibration,
# replayed on the same Qwen3-8B step-time estimate: real acceptance shapes, not a real pairing.
DOMAINS = {
    "chat": {"acceptance": "preset:dspark:chat"},
    "code": {"acceptance": "preset:dspark:code"},
    "markov (measured)": {
        "acceptance": "traces/acceptance/smollm2-markov.parquet",
        "calibration": "experiments/drafters/calibration/markov/calibration.json",
    },
}
SEEDS = [0, 1, 2]
BASE = dict(
    rate_scale=8.0,
    max_requests=1000,
    gamma=7,
    profile="profiles/h200-qwen3-8b-vllm2023-roofline.csv",
)
COLUMNS = [
    "tps_p50",
    "throughput_tok_s",
    "mean_verify_budget",
    "accepted_length_mean",
    "verification_waste",
    "mean_batch_size",
]


def run(**kw) -> dict:
    s = simulate(RunSpec(**{**BASE, **kw})).summary
    return {k: s[k] for k in COLUMNS}


def main() -> None:
    rows = []
    for domain, acceptance in DOMAINS.items():
        for load, seqs in LOADS.items():
            for policy in POLICIES:
                for seed in SEEDS:
                    r = run(policy=policy, max_seqs=seqs, seed=seed, **acceptance)
                    cell = {"domain": domain, "load": load, "max_seqs": seqs, "policy": policy}
                    rows.append({**cell, "seed": seed, **r})
                    print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(HERE / "results.csv", index=False, float_format="%.4g")

    trace = str(HERE / "chat_overconf2.parquet")
    calib = str(HERE / "calibration" / "calibration.json")
    cal_rows = []
    for load, seqs in LOADS.items():
        for label, kw in (
            ("raw (over-confident)", {"acceptance": trace, "calibration": "raw"}),
            ("after STS", {"acceptance": trace, "calibration": calib}),
            ("calibrated by construction", {"acceptance": "preset:dspark:chat"}),
        ):
            for seed in SEEDS:
                r = run(policy="dspark", max_seqs=seqs, seed=seed, **kw)
                cal_rows.append({"load": load, "confidences": label, "seed": seed, **r})
                print(cal_rows[-1], flush=True)
    pd.DataFrame(cal_rows).to_csv(HERE / "calibration_cost.csv", index=False, float_format="%.4g")

    with open(HERE / "results.md", "w") as f:
        f.write(
            f"Each cell: mean over seeds {SEEDS} [min..max]. A difference between two policies is "
            "called only where their ranges do not overlap.\n\n"
        )
        for domain in DOMAINS:
            part = table[table.domain == domain].groupby(["policy", "load"])
            f.write(
                f"## {domain}: per-user speed p50 (tok/s) / throughput (tok/s) / verify budget\n\n"
            )
            f.write("| policy | " + " | ".join(LOADS) + " |\n|---|" + "---|" * len(LOADS) + "\n")
            for policy in POLICIES:
                cells = []
                for ld in LOADS:
                    g = part.get_group((policy, ld))
                    cells.append(
                        f"{_spread(g['tps_p50'], '.0f')} / "
                        f"{_spread(g['throughput_tok_s'], '.0f')} / "
                        f"{g['mean_verify_budget'].mean():.2f}"
                    )
                f.write(f"| {policy} | " + " | ".join(cells) + " |\n")
            f.write("\n")
        f.write("## dspark: what miscalibration costs (chat, overconf=2 drafter)\n\n")
        cal = pd.DataFrame(cal_rows).drop(columns="seed").groupby(["load", "confidences"])
        spread = cal["tps_p50"].agg(["min", "max"]).add_prefix("tps_p50_")
        f.write(frame_table(cal.mean().join(spread).reset_index()))


def _spread(values: pd.Series, fmt: str) -> str:
    return f"{values.mean():{fmt}} [{values.min():{fmt}}..{values.max():{fmt}}]"


if __name__ == "__main__":
    main()
