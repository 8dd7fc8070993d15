"""Compare the engine probes with dsim's estimate of the same work (rules: README.md, Engine
probes; applied by `dsim.hardware.probe_check`). Runs on the CPU once the probes have come back:

    python experiments/gpu_profile/compare_probes.py [--probes serving/engine-probes.json]

Writes probes_comparison.{json,md} into experiments/gpu_profile/serving/ (or --out-dir).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from dsim.fileio import write_json, write_with  # noqa: E402
from dsim.hardware.probe_check import compare  # noqa: E402
from dsim.report import frame_table  # noqa: E402


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _findings(s: dict) -> list[str]:
    lines = []
    if p := s.get("padding"):
        lines.append(
            f"- Padding: {p.get('within', 0)} of {p['points']} pairs within "
            f"{p.get('tolerance', 0):.0%}; median |error| {_pct(p.get('median_abs'))}, worst "
            f"{_pct(p.get('worst_abs'))}."
        )
    if la := s.get("launch"):
        med, excess = (
            "n/a" if v is None else f"{v:.1f}"
            for v in (
                la["median_engine_launch_us_per_layer"],
                la["median_eager_excess_us_per_layer"],
            )
        )
        lines.append(
            f"- Launch: engine-scale {med} us per layer (median over {la['points']} points with "
            f"n <= 64; eager excess {excess} us per layer with aten's ops) against the "
            f"prior {la['prior_us_per_layer']:.0f} us, range {la['prior_range_us']}: "
            f"{'holds' if la['holds'] else 'does not hold'}."
        )
    if d := s.get("drafter"):
        lines.append(
            f"- Drafter (EAGLE-3): median |error| {_pct(d['median_abs'])} (target < "
            f"{d['target_median_abs']:.0%}: {'met' if d['met'] else 'missed'}), worst "
            f"{_pct(d['worst_abs'])}, signed {_pct(d['median_signed'])}; "
            f"{d['passes_below_host_floor']} of {d['points']} passes below the "
            f"{d['host_floor_ms']:.3f} ms host floor."
        )
    if sm := s.get("sampler"):
        shares = ", ".join(f"{m} {_pct(v)}" for m, v in sm["median_share"].items())
        lines.append(
            f"- Sampler: median share of the verify step {shares}; per-round term 0 "
            f"{'contradicted' if sm['per_round_zero_contradicted'] else 'not contradicted'} "
            f"(greedy threshold {sm['threshold']:.0%})."
        )
    return lines


def markdown(tables: dict[str, pd.DataFrame], summary: dict, source: str) -> str:
    """The summary's findings, then each rule's table."""
    head = f"# Engine probes vs dsim's estimate (`{source}`, {summary['device']})"
    parts = [head, "", *_findings(summary), f"- Points skipped on the device: {summary['skipped']}"]
    for name, table in tables.items():
        if len(table):
            parts += ["", f"## {name}", "", frame_table(table).rstrip()]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", default=str(HERE / "serving/engine-probes.json"))
    parser.add_argument("--out-dir", default=str(HERE / "serving"))
    args = parser.parse_args(argv)
    probes = json.loads(Path(args.probes).read_text())
    tables, summary = compare(probes)
    out = Path(args.out_dir)
    records = {k: t.to_dict(orient="records") for k, t in tables.items()}
    write_json(out / "probes_comparison.json", {"probes": Path(args.probes).name, **summary,
                                                "tables": records})  # fmt: skip
    md = markdown(tables, summary, Path(args.probes).name)
    write_with(out / "probes_comparison.md", lambda tmp: tmp.write_text(md))
    print("\n".join(_findings(summary)))


if __name__ == "__main__":
    main()
