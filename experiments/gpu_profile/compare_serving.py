"""Compare a serving-grade GPU profile with the `gpu-only` estimate, point by point (rules:
README.md, Serving-grade profile). Runs on the CPU once the profile has come back:

    python experiments/gpu_profile/compare_serving.py [--profile profiles/h200-qwen3-8b-serving.csv]

Writes serving_comparison.{csv,json,md} into experiments/gpu_profile/serving/ (or --out-dir).
The estimate is evaluated at the measured points themselves (`dsim.hardware.estimate_check`),
Qwen3-8B bf16 on the GPU the profile's device column names (H100 or H200).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from dsim.fileio import write_json, write_with  # noqa: E402
from dsim.hardware.estimate_check import LEVEL_TARGET, SHAPE_TOL, compare  # noqa: E402
from dsim.hardware.latency import read_profile  # noqa: E402
from dsim.hardware.probe_check import gpu_key  # noqa: E402


def markdown(table: pd.DataFrame, summary: dict, profile: str) -> str:
    lv, sh = summary["level"], summary["shape"]
    lines = [
        f"# Serving-grade profile vs the gpu-only estimate (`{profile}`)",
        "",
        f"- Level: median |error| {lv['median_abs']:.1%} (target < {LEVEL_TARGET:.0%}: "
        f"{'met' if lv['met'] else 'missed'}), worst {lv['worst_abs']:.1%}, median signed "
        f"{lv['median_signed']:+.1%}; estimate below measured at {lv['estimate_below_measured']}"
        f" of {lv['points']} points.",
        f"- Shape T(R, q) / T(R, 1): {sh['cells_within_tolerance']} of {sh['cells']} cells "
        f"within {SHAPE_TOL:.0%}"
        + (f", median |error| {sh['median_abs_error']:.1%}" if sh["cells"] else ""),
        "",
        "| R | q | C | measured ms | estimate ms | level error | measured shape | "
        "estimated shape | shape error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in table.itertuples():
        shape = "" if np.isnan(row.shape_error) else f"{row.shape_error:+.1%}"
        lines.append(
            f"| {row.num_seqs} | {row.q} | {row.context_len} | {row.latency_ms:.3f} | "
            f"{row.estimate_ms:.3f} | {row.level_error:+.1%} | {row.measured_shape:.3f} | "
            f"{row.estimated_shape:.3f} | {shape} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(ROOT / "profiles/h200-qwen3-8b-serving.csv"))
    parser.add_argument("--out-dir", default=str(HERE / "serving"))
    args = parser.parse_args(argv)
    profile = read_profile(args.profile)
    gpu = gpu_key(str(profile["device"].iloc[0])) if "device" in profile else "h200"
    table, summary = compare(profile, gpu)
    out = Path(args.out_dir)
    name = Path(args.profile).name
    write_with(out / "serving_comparison.csv", lambda tmp: table.to_csv(tmp, index=False))
    write_json(out / "serving_comparison.json", {"profile": name, **summary})
    md = markdown(table, summary, name)
    write_with(out / "serving_comparison.md", lambda tmp: tmp.write_text(md))
    print(md.split("\n\n| R")[0])


if __name__ == "__main__":
    main()
