"""The engine and ragged-penalty brackets of the SLA tiers, from the sweeps' points (README.md).

Reads DIR/points.parquet of every sweep configs.py writes (engines/STEM.toml -> STEM/), reads
each through dsim's own analysis (the overload rule, seed frontiers, SLA maxima) and writes
brackets.md: per engine the maximum throughput at each tier per policy and the tier beyond
which each policy cannot serve; dspark against the best fixed length and against MTP-1 with
the seeds' range; the bracket over engines and, for dspark, over the ragged verify penalty (its
dspark points against the same engine's fixed lengths, which are never ragged). Run from the
repo root after the sweeps:

    python experiments/sla_tiers/brackets.py
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from dsim.fileio import write_with  # noqa: E402
from dsim.pareto.analysis import Analysis, analyse  # noqa: E402
from dsim.pareto.config import BEST_FIXED, SweepConfig, load_config  # noqa: E402
from dsim.report import markdown_table  # noqa: E402
from experiments.closed_loop import ENGINES  # noqa: E402
from experiments.sla_tiers.configs import RAGGED  # noqa: E402

DSPARK = "dspark"


def points(stem: str) -> pd.DataFrame | None:
    path = HERE / stem / "points.parquet"
    return pd.read_parquet(path) if path.is_file() else None


def config(stem: str) -> SweepConfig:
    return load_config(HERE / "engines" / f"{stem}.toml")


def ratio(row: pd.Series) -> str:
    """A ratio over the baseline with its seeds' range; `~` where the range straddles 1."""
    if math.isnan(row["max_throughput_tok_s"]):
        return "cannot meet"
    if math.isinf(row["ratio"]):
        return "baseline cannot meet"
    lo, hi = row["ratio_min"], row["ratio_max"]
    mark = "" if lo > 1 or hi < 1 else " ~"
    return f"x{row['ratio']:.3f} [{lo:.3f}..{hi:.3f}]{mark}"


def cell(sla: pd.DataFrame, anchor: float, policy: str) -> pd.Series:
    return sla[(sla["sla_tps"] == anchor) & (sla["policy"] == policy)].iloc[0]


def engine_section(engine: str, cfg: SweepConfig, pts: pd.DataFrame) -> tuple[str, dict]:
    """One engine's tables, and its dspark ratios (over best-fixed and MTP-1) per anchor."""
    fixed = analyse(cfg, pts.copy())
    over_mtp1 = analyse(replace(cfg, baseline="mtp1"), pts.copy())
    keyed = fixed.means.drop_duplicates(["policy", "load"])
    excluded = int((keyed["excluded"] != "").sum())
    anchors, policies = cfg.sla_anchors, [*cfg.policies, BEST_FIXED]
    rows = []
    for anchor in anchors:
        best = [cell(fixed.sla, anchor, p)["max_throughput_tok_s"] for p in policies]
        rows.append([f"{anchor:g}", *("-" if math.isnan(b) else f"{b:,.0f}" for b in best)])
    text = [
        f"## {engine} (`{cfg.base.profile}`)\n",
        f"{excluded} of {len(keyed)} policy-cap points excluded by the overload rule.\n",
        "Maximum throughput (tok/s, mean over seeds) at each tier; - = some seed cannot meet it:\n",
        markdown_table(["SLA tok/s/user", *policies], rows) + "\n",
        stops(fixed, cfg) + "\n",
        "dspark over the best fixed length and over MTP-1 at each tier (mean [min..max] of "
        "the per-seed ratio):\n",
    ]
    gains = {"best-fixed": {}, "mtp1": {}}
    table = []
    for anchor in anchors:
        vs_fixed = ratio(cell(fixed.sla, anchor, DSPARK))
        vs_mtp1 = ratio(cell(over_mtp1.sla, anchor, DSPARK))
        gains["best-fixed"][anchor], gains["mtp1"][anchor] = vs_fixed, vs_mtp1
        table.append([f"{anchor:g}", vs_fixed, vs_mtp1])
    text.append(markdown_table(["SLA tok/s/user", "over best-fixed", "over mtp1"], table) + "\n")
    text.append(matched(versus_fixed(cfg, pts)))
    return "\n".join(text), gains


def versus_fixed(cfg: SweepConfig, pts: pd.DataFrame) -> Analysis:
    """dspark and the fixed lengths alone (the matched throughputs are those they share)."""
    keep = pts["policy"].str.startswith("fixed:") | (pts["policy"] == DSPARK)
    return analyse(replace(cfg, policies=(*cfg.baseline_members, DSPARK)), pts[keep].copy())


def stops(result: Analysis, cfg: SweepConfig) -> str:
    """Each policy's best median speed (mean over seeds) and the first tier it cannot meet."""
    rows = []
    for policy in cfg.policies:
        speed = result.means[result.means["policy"] == policy]["tps_p50"].max()
        met = result.sla[(result.sla["policy"] == policy)].dropna(subset="max_throughput_tok_s")
        above = [a for a in cfg.sla_anchors if a not in set(met["sla_tps"])]
        rows.append([policy, f"{speed:.0f}", f"{above[0]:g}" if above else "none swept"])
    header = ["policy", "best median tok/s/user", "first tier it cannot serve"]
    return markdown_table(header, rows) + "\n"


def matched(result: Analysis) -> str:
    """dspark's speed gain over the best fixed length at matched throughputs."""
    g = result.gains[result.gains["policy"] == DSPARK]
    rows = [
        [f"{r.throughput_tok_s:,.0f}", f"{100 * r.gain:+.1f}% [{100 * r.gain_min:+.1f}.."
         f"{100 * r.gain_max:+.1f}]"]
        for r in g.itertuples()
    ]  # fmt: skip
    header = ["throughput tok/s", "dspark speed gain over best-fixed"]
    return "At matched throughput:\n\n" + markdown_table(header, rows) + "\n"


def ragged_rows(cfg: SweepConfig, main: pd.DataFrame, engine: str) -> dict[str, dict]:
    """dspark over the same engine's best fixed length at each bracketing penalty, from none
    through the engine's prior (its own sweep) to the highest."""
    low, high = RAGGED[engine]
    fixed = main[main["policy"].str.startswith("fixed:")]
    runs = {}
    for label, own in ((f"{low:g}", points(f"{engine}-ragged{low:g}")), ("prior", main),
                       (f"{high:g}", points(f"{engine}-ragged{high:g}"))):  # fmt: skip
        if own is not None:
            dspark = own[own["policy"] == DSPARK]
            runs[f"{engine} penalty {label}"] = pd.concat([fixed, dspark], ignore_index=True)
    slas = {label: versus_fixed(cfg, pts).sla for label, pts in runs.items()}
    return {
        label: {a: ratio(cell(sla, a, DSPARK)) for a in cfg.sla_anchors}
        for label, sla in slas.items()
    }


def bracket(columns: dict[str, dict], anchors: tuple[float, ...]) -> str:
    rows = [[f"{a:g}", *(col[a] for col in columns.values())] for a in anchors]
    return markdown_table(["SLA tok/s/user", *columns], rows) + "\n"


def main() -> None:
    out = ["# SLA tiers: brackets over engines and the ragged verify penalty\n"]
    over = {"best-fixed": {}, "mtp1": {}}
    missing, anchors = [], ()
    for engine in ENGINES:
        cfg, pts = config(engine), points(engine)
        anchors = cfg.sla_anchors
        if pts is None:
            missing.append(engine)
            continue
        text, gains = engine_section(engine, cfg, pts)
        out.append(text)
        for base in over:
            over[base][engine] = gains[base]
    if missing:
        out.append(f"Not run: {', '.join(missing)}.\n")
    for base, columns in over.items():
        out += [f"## Bracket over engines: dspark over {base}\n", bracket(columns, anchors)]
    columns = {}
    for engine in RAGGED:
        main_pts = points(engine)
        if main_pts is not None:
            columns |= ragged_rows(config(engine), main_pts, engine)
    out += ["## Bracket over the ragged verify penalty: dspark over best-fixed\n"]
    out.append(bracket(columns, anchors) if columns else "Not run.\n")
    text = "\n".join(out)
    write_with(HERE / "brackets.md", lambda tmp: tmp.write_text(text))
    print(text)


if __name__ == "__main__":
    main()
