"""A prediction committed before any comparison: EAGLE's speed-up over plain decoding against K
for Llama-3.1-8B on one H100 at batch 1, under the engine v2 presets a user takes (writes
eagle_k_prediction.md beside this file).

    PYTHONPATH=. .venv/bin/python experiments/engines/eagle_k_prediction.py     # seconds

What it builds in: an EAGLE-1 drafter (`--draft-model eagle`) on the target's own setup; a
chain of K drafts whose position i is accepted with probability a^i given the earlier ones
(the closed form E[tokens] = (1 - a^(K+1)) / (1 - a)); context 1,000 tokens; one request.
The round is the engine's verify step over 1 + K tokens plus K drafter passes (the first over
1 + K tokens), each at least the engine's host time per proposer step, plus per_round
(`DraftCost`). The acceptance of the published runs is not known here, so the prediction is a
family over a. No published speed-up was read for it; it is judged by the lead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from dsim.engine.config import DraftCost
from dsim.fileio import write_with
from dsim.hardware.draft_roofline import drafter_profile
from dsim.hardware.engines import get_engine
from dsim.hardware.latency import LatencyModel
from dsim.hardware.roofline import roofline_profile

DIR = Path(__file__).resolve().parent
ROOT = DIR.parent.parent
MODEL, GPU, CONTEXT = "llama3.1-8b", "h100", 1000
ACCEPTANCE = (0.6, 0.7, 0.8, 0.9)
KS = range(1, 9)
ENGINES = ("vllm", "vllm-0.8", "sglang")


def speedups(engine: str) -> dict[float, list[float]]:
    target, _ = roofline_profile(GPU, MODEL, [1024], engine=engine)
    drafter, _ = drafter_profile(GPU, MODEL, "eagle", [1024], engine=engine)
    price, draft = LatencyModel(target), LatencyModel(drafter)
    cost = DraftCost(profile=draft, kind="ar", spec_round=get_engine(engine, GPU).spec_round)
    plain = float(price.latency(1, 1, CONTEXT))
    out = {}
    for a in ACCEPTANCE:
        row = []
        for k in KS:
            tokens = (1 - a ** (k + 1)) / (1 - a)
            round_s = float(price.latency(1 + k, 1, CONTEXT)) + cost.seconds(1, k, CONTEXT, price)
            row.append(tokens * plain / round_s)
        out[a] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="eagle_k_prediction.md", help="beside this script")
    out = DIR / parser.parse_args().out
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Prediction: EAGLE speed-up against K, Llama-3.1-8B, one H100, batch 1",
        "",
        f"Made by `experiments/engines/eagle_k_prediction.py` at commit {commit}, {when} "
        f"(load {load}; deterministic). Committed before any comparison with a published run "
        "(the lead holds those out). Assumptions: the script's docstring.",
        "",
    ]
    for engine in ENGINES:
        table = speedups(engine)
        lines += [
            f"## `--engine {engine}`",
            "",
            "| acceptance a | " + " | ".join(f"K={k}" for k in KS) + " | best K |",
            "| --- " * (len(KS) + 2) + "|",
        ]
        for a, row in table.items():
            best = max(KS, key=lambda k: row[k - 1])
            cells = " | ".join(f"{s:.2f}" for s in row)
            lines.append(f"| {a} | {cells} | {best} |")
        lines.append("")
    write_with(out, lambda p: p.write_text("\n".join(lines) + "\n"))


if __name__ == "__main__":
    main()
