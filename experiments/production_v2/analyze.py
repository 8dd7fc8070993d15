"""(a)-(e) of production_v2 for one config NAME, from its sweeps' points.parquet (README.md).

NAME is a config's path under this folder without `.toml` (`dense8b`, `engines/dense8b-vllm`).
Reads NAME/points.parquet (NAME.toml's sweep), NAME-mtp1/ (MTP-1 on its own drafter cost) and,
where they were swept, NAME-ragged0/ and NAME-ragged2x/ (dspark at other ragged verify
penalties) and NAME-replicas/ (e); the anchors in NAME.toml. Writes results-STEM.md and
results-STEM.json beside NAME (STEM: NAME's last part; the json holds the headline tables for
bracket_table.py).

Which points count (docs/pareto.md, the overload rule): an unstable point, or one whose busiest
prefill replica was busy more than 80% of the time (prefill would limit it), is excluded from
every frontier, gain and anchor, in every seed of its policy and load; each sweep's exclusions
are counted and listed. A difference is called only where the whole min..max over seeds lies on
one side of zero.

Run: .venv/bin/python experiments/production_v2/analyze.py engines/dense8b-vllm   (or dense8b)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from dsim.fileio import write_json, write_with  # noqa: E402
from dsim.pareto.config import load_config  # noqa: E402
from dsim.pareto.exclusion import exclusions  # noqa: E402
from dsim.pareto.frontier import (  # noqa: E402
    X,
    Y,
    baseline_speed,
    matched_gains,
    pareto_front,
    seed_fronts,
    seed_means,
    sla_throughputs,
)
from dsim.report import frame_table  # noqa: E402

PREFILL_LIMIT = 0.8
MTP1_OWN = "mtp1 (own drafter cost)"
FIXED = tuple(f"fixed:{k}" for k in range(1, 6))
RAGGED_SWEEPS = ("-ragged0", "-ragged2x")


def read(path: Path) -> pd.DataFrame | None:
    file = path / "points.parquet"
    return pd.read_parquet(file) if file.is_file() else None


def dspark_label(penalty: float) -> str:
    return f"dspark (ragged {penalty:g})"


def load_points(name: Path) -> pd.DataFrame:
    """Every sweep of NAME in one table: `sweep` names the config, `policy` is renamed where two
    sweeps run the same policy (MTP-1 on its own cost, dspark at another ragged penalty), and
    `excluded` says why a point does not count ("" when it does)."""
    parts = [read(name).assign(sweep=name.name)]
    own = read(Path(f"{name}-mtp1"))
    parts.append(own.assign(sweep=f"{name.name}-mtp1", policy=MTP1_OWN))
    for suffix in RAGGED_SWEEPS:
        pts = read(Path(f"{name}{suffix}"))
        if pts is not None:
            penalty = load_config(f"{name}{suffix}.toml").base.ragged_penalty
            parts.append(pts.assign(sweep=f"{name.name}{suffix}", policy=dspark_label(penalty)))
    points = pd.concat(parts, ignore_index=True)
    points["layout"] = points["layout"].fillna("") if "layout" in points else ""
    points["excluded"] = exclusions(points, load_config(f"{name}.toml").sla)
    limited = (
        (points["prefill_busy_max"] > PREFILL_LIMIT)
        .groupby([points["policy"], points["load"]])
        .transform("any")
    )
    points.loc[limited, "excluded"] = points.loc[limited, "excluded"].map(
        lambda why: "; ".join(w for w in (why, "prefill-limited") if w)
    )
    return points


def exclusion_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per sweep: its points, how many were excluded, and which policy@load (why)."""
    rows = []
    for sweep, pts in points.groupby("sweep", sort=False):
        out = pts[pts["excluded"] != ""]
        which = out.groupby(["policy", "load"], sort=True)["excluded"].first()
        listed = ", ".join(f"{p}@{load:g} ({why})" for (p, load), why in which.items())
        rows.append([sweep, len(pts), len(out), listed or "-"])
    return pd.DataFrame(rows, columns=["sweep", "points", "excluded", "excluded policy@load"])


def called(low: float, high: float) -> str:
    """The rule: a difference is called only where the whole min..max is on one side of 0."""
    if np.isnan(low) or np.isnan(high):
        return "n/a"
    return "gain" if low > 0 else "loss" if high < 0 else "within spread"


def gains_at_loads(counts: pd.DataFrame, policy: str, members: tuple[str, ...]) -> pd.DataFrame:
    """`policy`'s gain at each of its loads that count: each seed's point against the best of
    `members` at the same throughput on that seed's frontiers (NaN where no member reaches it),
    as the mean over seeds with min..max and whether the difference is called."""
    fronts = {seed: pareto_front(p) for seed, p in counts.groupby("seed")}
    rows = []
    for load, pts in counts[counts["policy"] == policy].groupby("load"):
        base = np.array(
            [
                baseline_speed(fronts[s], members, y)
                for s, y in zip(pts["seed"], pts[Y], strict=True)
            ]
        )
        gain = pts[X].to_numpy() / base - 1.0
        low, high = float(np.min(gain)), float(np.max(gain))
        rows.append(
            {
                "policy": policy,
                "load": float(load),
                "concurrency": float(pts["mean_batch_size"].mean()),
                Y: float(pts[Y].mean()),
                X: float(pts[X].mean()),
                "baseline_tps_p50": float(np.mean(base)),
                "gain": float(np.mean(gain)),
                "gain_min": low,
                "gain_max": high,
                "called": called(low, high),
            }
        )
    return pd.DataFrame(rows)


def replicas_section(path: Path, anchors: list[float]) -> list[str]:
    """(e) fewest replicas meeting each anchor at the recorded rate, in every seed."""
    reps = read(path)
    if reps is None:
        return [f"Not run: `{path.name}.toml` has not been swept.\n"]
    rows = []
    for policy in reps["policy"].unique():
        worst = reps[reps["policy"] == policy].groupby("load")[X].min()  # the slowest seed
        for anchor in anchors:
            ok = worst[worst >= anchor]
            rows.append([policy, anchor, int(ok.index.min()) if len(ok) else "none swept"])
    return [frame_table(pd.DataFrame(rows, columns=["policy", "sla_tps", "fewest_replicas"]))]


def main() -> None:
    name = HERE / sys.argv[1]
    cfg = load_config(f"{name}.toml")
    anchors = list(cfg.sla_anchors)
    points = load_points(name)
    counts = points[points["excluded"] == ""]
    dsparks = [p for p in points["policy"].unique() if str(p).startswith("dspark")]
    fixed = tuple(p for p in FIXED if p in set(points["policy"]))
    out = [f"# production_v2 results: {sys.argv[1]} (profile `{cfg.base.profile}`)\n"]
    out += [
        "## Points excluded (overload rule; prefill-limited)\n",
        frame_table(exclusion_table(points)),
    ]

    a = pd.concat([gains_at_loads(counts, p, fixed) for p in dsparks], ignore_index=True)
    out += [
        "## (a) dspark vs the best fixed length (fixed:1..5) at its own loads\n",
        frame_table(a),
    ]
    fronts, front = seed_fronts(counts), pareto_front(seed_means(counts))
    levels = matched_gains(front, dsparks, "best-fixed", fronts=fronts, members=fixed)
    out += ["Matched-throughput levels over the range all share:\n", frame_table(levels)]

    b = pd.concat([gains_at_loads(counts, p, (MTP1_OWN,)) for p in dsparks], ignore_index=True)
    out += [f"## (b) dspark's per-user speed gain over {MTP1_OWN} at its own loads\n"]
    policies = [p for p in points["policy"].unique() if p != MTP1_OWN]
    levels_b = matched_gains(front, [MTP1_OWN, *policies], MTP1_OWN, fronts=fronts)
    out += [frame_table(b), "Every policy at matched-throughput levels:\n", frame_table(levels_b)]

    means = seed_means(points[points["policy"].isin(dsparks)]).sort_values(["policy", "load"])
    cols = ["policy", "load", "mean_batch_size", "mean_verify_budget", X, Y, "excluded"]
    out += ["## (c) dspark verify budget against decode concurrency\n", frame_table(means[cols])]

    sla = sla_throughputs(front, [MTP1_OWN, *policies], MTP1_OWN, anchors, fronts=fronts)
    out += ["## (d) max throughput at each SLA anchor (tps_p50 >= anchor)\n", frame_table(sla)]
    out += ["## (e) fewest replicas meeting each anchor at the recorded rate\n"]
    out += replicas_section(Path(f"{name}-replicas"), anchors)

    stem = name.parent / f"results-{name.name}"
    text = "\n".join(out)
    write_with(Path(f"{stem}.md"), lambda tmp: tmp.write_text(text))
    tables = {"a": a, "b": b, "c": means[cols], "d": sla, "excluded": exclusion_table(points)}
    headline = {k: json.loads(t.to_json(orient="records")) for k, t in tables.items()}
    write_json(Path(f"{stem}.json"), {"profile": cfg.base.profile, "anchors": anchors, **headline})
    print(text)


if __name__ == "__main__":
    main()
