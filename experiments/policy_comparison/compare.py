"""Per-user speed and throughput of every policy at three concurrency levels (issue 3).

H200 roofline profile of Qwen3-8B, chat and code presets (gamma 7), the first 1,000 requests of
the Azure conv trace arriving 8x faster than recorded, so a queue always waits and the
concurrency cap (--max-seqs 4 / 32 / 256) sets the load. Then the cost of miscalibration:
dspark on an over-confident drafter's trace, raw vs after STS.
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
BASE = dict(rate_scale=8.0, max_requests=1000, gamma=7)
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
    for domain in ("chat", "code"):
        for load, seqs in LOADS.items():
            for policy in POLICIES:
                r = run(acceptance=f"preset:dspark:{domain}", policy=policy, max_seqs=seqs)
                rows.append(
                    {"domain": domain, "load": load, "max_seqs": seqs, "policy": policy, **r}
                )
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(HERE / "results.csv", index=False, float_format="%.4g")

    trace = str(HERE / "chat_overconf2.parquet")
    calib = str(HERE / "calibration" / "calibration.json")
    cal_rows = []
    for load, seqs in LOADS.items():
        for label, kw in (
            ("raw (over-confident)", {"calibration": "raw"}),
            ("after STS", {"calibration": calib}),
            ("calibrated by construction", None),
        ):
            if kw is None:
                r = run(acceptance="preset:dspark:chat", policy="dspark", max_seqs=seqs)
            else:
                r = run(acceptance=trace, policy="dspark", max_seqs=seqs, **kw)
            cal_rows.append({"load": load, "confidences": label, **r})
            print(cal_rows[-1], flush=True)
    pd.DataFrame(cal_rows).to_csv(HERE / "calibration_cost.csv", index=False, float_format="%.4g")

    with open(HERE / "results.md", "w") as f:
        for domain in ("chat", "code"):
            part = table[table.domain == domain].pivot(index="policy", columns="load")
            f.write(
                f"## {domain}: per-user speed p50 (tok/s) / throughput (tok/s) / verify budget\n\n"
            )
            f.write("| policy | " + " | ".join(LOADS) + " |\n|---|" + "---|" * len(LOADS) + "\n")
            for policy in POLICIES:
                cells = [
                    f"{part.loc[policy, ('tps_p50', ld)]:.0f} / "
                    f"{part.loc[policy, ('throughput_tok_s', ld)]:.0f} / "
                    f"{part.loc[policy, ('mean_verify_budget', ld)]:.2f}"
                    for ld in LOADS
                ]
                f.write(f"| {policy} | " + " | ".join(cells) + " |\n")
            f.write("\n")
        f.write("## dspark: what miscalibration costs (chat, overconf=2 drafter)\n\n")
        f.write(frame_table(pd.DataFrame(cal_rows)))


if __name__ == "__main__":
    main()
