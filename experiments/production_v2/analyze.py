"""(a)-(e) of production_v2 for one model, from its three sweeps' points.parquet (README.md).

Reads MODEL/points.parquet (dense8b.toml's sweep), MODEL-mtp1/points.parquet and
MODEL-replicas/points.parquet under this folder, and the anchors in MODEL.toml; writes
results-MODEL.md. Points whose busiest prefill replica was busy more than 80% of the time are
dropped first (prefill would limit them) and listed.

Run: .venv/bin/python experiments/production_v2/analyze.py dense8b   (or moe)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from dsim.fileio import write_with  # noqa: E402
from dsim.pareto.config import load_config  # noqa: E402
from dsim.pareto.frontier import (  # noqa: E402
    X,
    matched_gains,
    pareto_front,
    seed_fronts,
    seed_means,
    sla_throughputs,
)
from dsim.report import frame_table  # noqa: E402

PREFILL_LIMIT = 0.8
ENVELOPE, MTP1_OWN = "fixed:1..5 envelope", "mtp1 (own drafter cost)"


def read(name: str) -> pd.DataFrame:
    return pd.read_parquet(HERE / name / "points.parquet")


def main() -> None:
    model = sys.argv[1]
    anchors = list(load_config(HERE / f"{model}.toml").sla_anchors)
    main_pts = read(model)
    own = read(f"{model}-mtp1").assign(policy=MTP1_OWN)
    both = pd.concat([main_pts, own], ignore_index=True)
    limited = both[both["prefill_busy_max"] > PREFILL_LIMIT]
    both = both[both["prefill_busy_max"] <= PREFILL_LIMIT]
    out = [f"# production_v2 results: {model}\n"]
    if len(limited):
        cols = ["policy", "load", "seed", "prefill_busy_max"]
        out += ["Dropped (prefill-limited) points:\n", frame_table(limited[cols])]

    # (a) the scheduler's own gain: dspark vs the upper envelope of fixed:1..5, same drafter
    fixed = both["policy"].str.fullmatch(r"fixed:[1-5]")
    env = pd.concat([both[fixed].assign(policy=ENVELOPE), both[both["policy"] == "dspark"]])
    fronts = seed_fronts(env)
    gains = matched_gains(pareto_front(env), ["dspark", ENVELOPE], ENVELOPE, fronts=fronts)
    out += ["## (a) dspark vs the best fixed length at matched throughput\n", frame_table(gains)]

    # (b) whole system over MTP-1 on its own drafter cost; (d) throughput at each anchor
    policies = [p for p in both["policy"].unique() if p != MTP1_OWN]
    fronts = seed_fronts(both)
    front = pareto_front(both)
    gains = matched_gains(front, [MTP1_OWN, *policies], MTP1_OWN, fronts=fronts)
    out += [f"## (b) per-user speed gain over {MTP1_OWN} at matched throughput\n"]
    out += [frame_table(gains)]
    sla = sla_throughputs(front, [MTP1_OWN, *policies], MTP1_OWN, anchors, fronts=fronts)
    out += ["## (d) max throughput at each SLA anchor (tps_p50 >= anchor)\n", frame_table(sla)]

    # (c) verify budget against decode concurrency
    means = seed_means(both[both["policy"] == "dspark"]).sort_values("load")
    cols = ["load", "mean_batch_size", "mean_verify_budget", X, "throughput_tok_s"]
    out += ["## (c) dspark verify budget against decode concurrency\n", frame_table(means[cols])]

    # (e) fewest replicas meeting each anchor at the recorded rate, in every seed
    out += ["## (e) fewest replicas meeting each anchor at the recorded rate\n"]
    if not (HERE / f"{model}-replicas" / "points.parquet").is_file():
        out += [f"Not run: `{model}-replicas.toml` has not been swept.\n"]
    else:
        reps = read(f"{model}-replicas")
        rows = []
        for policy in reps["policy"].unique():
            p = reps[reps["policy"] == policy]
            worst = p.groupby("load")[X].min()  # the slowest seed at each replica count
            for anchor in anchors:
                ok = worst[worst >= anchor]
                rows.append([policy, anchor, int(ok.index.min()) if len(ok) else "none swept"])
        table = pd.DataFrame(rows, columns=["policy", "sla_tps", "fewest_replicas"])
        out += [frame_table(table)]
    text = "\n".join(out)
    write_with(HERE / f"results-{model}.md", lambda tmp: tmp.write_text(text))
    print(text)


if __name__ == "__main__":
    main()
