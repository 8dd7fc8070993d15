"""The published open- and closed-loop rows simulated as they ran (rules: reproduce_rules.md;
writes reproduce.md beside this file).

    .venv/bin/python experiments/engines/reproduce.py
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.fileio import write_with
from dsim.hardware import engine_fit
from dsim.hardware.roofline import write_roofline
from dsim.run import RunSpec, simulate

DIR = Path(__file__).resolve().parent
ROWS = range(0, 17)  # the SGLang PR row (17) has no published lengths
SEEDS = (0, 1, 2)
NIM = "NVIDIA NIM for LLMs (llama-3.3-70b-instruct container)"
# engine column -> (preset, profile's gpu, model, tp, dtype); the scheduling (step token
# budget, prefill mixing) and the KV budget are the profile engine's defaults
ENGINE = {
    "vLLM": ("vllm-0.8", ("h200", "deepseek-v3", 8, "fp8")),
    "SGLang": ("sglang", ("h200", "deepseek-v3", 8, "fp8")),
    NIM: ("trtllm", ("h100", "llama3.3-70b", 2, "fp8")),
}
MAX_SEQS = 256


def closed(row: pd.Series) -> bool:
    return not pd.isna(row["max_concurrency"])


def trace(row: pd.Series) -> str:
    lengths = f"prompt={int(row['input_len'])},output={int(row['output_len'])},sigma=0"
    if closed(row):
        c = int(row["max_concurrency"])
        return f"synthetic:n={max(10 * c, 20)},{lengths},concurrency={c}"
    return f"synthetic:rate={row['request_rate']:g},n={int(row['num_prompts'])},{lengths}"


def published(row: pd.Series) -> dict[str, float]:
    """The row's ITL, output tok/s and TTFT in the statistic its client reports."""
    if closed(row):
        ttft = float(re.search(r"mean TTFT ([0-9.]+) ms", row["notes"]).group(1))
        return {"itl": row["mean_tpot_ms"], "tok_s": row["output_tok_s"], "ttft": ttft}
    itl, ttft = row["median_itl_ms"], row["ttft_median_ms"]
    return {"itl": itl, "tok_s": row["output_tok_s"], "ttft": ttft}


def run_row(row: pd.Series, profile: Path) -> dict:
    out: dict[str, list[float]] = {"itl": [], "tok_s": [], "ttft": []}
    for seed in SEEDS:
        spec = RunSpec(
            trace=trace(row), profile=str(profile), policy="ar", seed=seed, max_seqs=MAX_SEQS
        )
        res = simulate(spec)
        if closed(row):  # NIM's client: means over requests
            req = res.requests
            tpot = (req["finish_s"] - req["first_token_s"]) / (req["output_tokens"] - 1)
            out["itl"].append(float(tpot.mean()) * 1e3)
            out["ttft"].append(float((req["first_token_s"] - req["arrival_s"]).mean()) * 1e3)
        else:
            out["itl"].append(res.summary["itl_p50_s"] * 1e3)
            out["ttft"].append(res.summary["ttft_p50_s"] * 1e3)
        out["tok_s"].append(res.summary["throughput_tok_s"])
    return out


def cell(sim: list[float], published: float) -> tuple[str, float]:
    mean = float(np.mean(sim))
    err = mean / published - 1.0
    return f"{mean:.1f} [{min(sim):.1f}, {max(sim):.1f}] | {published:g} | {err:+.1%}", err


def main() -> None:
    raw = engine_fit.raw_rows()
    lines = ["# Reproduction: the published rows simulated as they ran", ""]
    lines += ["Made by `reproduce.py` under `reproduce_rules.md` (committed before it ran; the"]
    lines += ["closed-loop rows by its addendum). Simulated: mean over seeds 0-2 [min, max]."]
    lines += ["Error: simulated mean / published - 1. Open-loop rows (x prompts): median ITL and"]
    lines += ["TTFT; closed-loop rows (x c=C): means, as NIM's client reports them. Each"]
    lines += ["engine's scheduling and KV budget are its profile's defaults (the last addendum)."]
    lines += [""]
    lines += ["| row | engine | in/out x load | in fit | ITL ms sim | published | error "]
    lines[-1] += "| output tok/s sim | published | error | TTFT ms sim | published | error |"
    lines += ["| --- " * 13 + "|"]
    errors: dict[str, dict[str, list[float]]] = {"fit": {}, "long": {}}
    with tempfile.TemporaryDirectory() as tmp:
        profiles = {}
        for engine, (preset, (gpu, model, tp, dtype)) in ENGINE.items():
            path = Path(tmp) / f"{preset}.csv"
            write_roofline(gpu, model, path, tp=tp, ep=1, dtype=dtype, engine=preset)
            profiles[engine] = path
        for i in ROWS:
            row = raw.iloc[i]
            preset = ENGINE[row["engine"]][0]
            sim = run_row(row, profiles[row["engine"]])
            group = "fit" if i in engine_fit.P_ROWS else "long"
            pub = published(row)
            cells = []
            for key in ("itl", "tok_s", "ttft"):
                text, err = cell(sim[key], float(pub[key]))
                cells.append(text)
                errors[group].setdefault(key, []).append(err)
            load = f"c={int(row['max_concurrency'])}" if closed(row) else int(row["num_prompts"])
            shape = f"{int(row['input_len'])}/{int(row['output_len'])} x {load}"
            inside = "yes" if group == "fit" else "no (long input)"
            lines.append(f"| {i} | {preset} | {shape} | {inside} | " + " | ".join(cells) + " |")
    lines += ["", "| rows | median abs err: ITL | output tok/s | TTFT |", "| --- " * 4 + "|"]
    for group, label in (("fit", "in the fit"), ("long", "long input, out of the fit")):
        e = errors[group]
        vals = " | ".join(f"{np.median(np.abs(e[k])):.1%}" for k in ("itl", "tok_s", "ttft"))
        lines.append(f"| {label} ({len(e['itl'])}) | {vals} |")
    write_with(DIR / "reproduce.md", lambda p: p.write_text("\n".join(lines) + "\n"))


if __name__ == "__main__":
    main()
