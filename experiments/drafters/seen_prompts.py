"""Is the 8,000-step confidence heads' over-confidence a train/held-out gap? markov on prompts it
was trained on (new temperature-1 answers) against the held-out prompts.

Rule, fixed before any result:
- Prompts: per domain, as many training prompts as the held-out set has (16 chat, 16 code,
  16 math, 8 qa, 8 translation, 4 rag, 4 summarization), the first in traces/prompts/train.jsonl
  order among those under MAX_CHARS (3,500) characters (prepare-data skipped the 19 prompts
  over 1,024 tokens; at ~4 characters a token this keeps clear of them). Written to
  seen_prompts/prompts.jsonl.
- Trace: `dsim collect` with the held-out trace's settings (run_v2e.sh): shipped markov.pt,
  temperature 1, 64 new tokens, batch 24, seed 0.
- Per prompt set: tau, first-position acceptance, mean first-position confidence, and the gap
  (confidence - acceptance at position 1), with a 90% bootstrap interval over sequences.
- Reading: if the seen-prompt gap is under half the held-out one and the two intervals do not
  overlap, over-fitting to the training prompts explains most of the over-confidence;
  otherwise it is not shown to.
Usage: python experiments/drafters/seen_prompts.py prompts
       .venv/bin/dsim collect --drafter drafters/markov.pt \
         --prompts experiments/drafters/seen_prompts/prompts.jsonl \
         --out experiments/drafters/seen_prompts/markov.parquet --max-new-tokens 64 --batch-size 24
       python experiments/drafters/seen_prompts.py report   (writes seen_prompts.md)
drafters/markov.pt means the 221k-token file of commit analyze.SHIPPED_8000 (once replaced:
`git show 971733a:drafters/markov.pt > runs/markov-221k.pt`); the report reads that commit's trace.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from ablations import summary
from analyze import REPO, SHIPPED_8000, first_position_gap, trace_at

HERE = Path(__file__).resolve().parent
OUT = HERE / "seen_prompts"
MAX_CHARS = 3500  # every held-out prompt is under 3,400 characters


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pick_prompts() -> None:
    want = Counter(p["domain"] for p in read_jsonl(REPO / "traces/prompts/heldout.jsonl"))
    picked = []
    for p in read_jsonl(REPO / "traces/prompts/train.jsonl"):
        if want[p["domain"]] and len(p["prompt"]) < MAX_CHARS:
            want[p["domain"]] -= 1
            picked.append(p)
    OUT.mkdir(exist_ok=True)
    text = "".join(json.dumps(p) + "\n" for p in picked)
    (OUT / "prompts.jsonl").write_text(text)
    print(f"{len(picked)} prompts; short of {dict(+want)}")


def gap_stats(df: pd.DataFrame, reps: int = 2000, seed: int = 0) -> dict[str, float]:
    """tau, first-position acceptance and confidence, gap with a bootstrap over sequences."""
    per = df.assign(acc1=df["accepted"] >= 1).groupby("seq_id")
    sums = per.agg(conf=("conf_1", "sum"), acc=("acc1", "sum"), n=("conf_1", "size")).to_numpy(
        float
    )
    pick = np.random.default_rng(seed).integers(0, len(sums), size=(reps, len(sums)))
    boot = sums[pick].sum(axis=1)  # (reps, 3): confidence, acceptance, rounds
    gaps = (boot[:, 0] - boot[:, 1]) / boot[:, 2]
    lo, hi = np.percentile(gaps, [5, 95])
    return {
        **summary(df),
        "confidence_1": float(df["conf_1"].mean()),
        "gap": first_position_gap(df),
        "gap_lo90": float(lo),
        "gap_hi90": float(hi),
        "sequences": len(sums),
    }


def report() -> None:
    rows = {
        "held-out prompts": gap_stats(trace_at(SHIPPED_8000, "markov")),
        "training prompts": gap_stats(pd.read_parquet(OUT / "markov.parquet")),
    }
    lines = [
        "| prompts | sequences | tau | first-position acceptance | mean confidence at 1 | "
        "gap [90%] |",
        "| --- | --- | --- | --- | --- | --- |",
    ] + [
        f"| {k} | {r['sequences']} | {r['tau']:.3f} | {r['first_position']:.3f} | "
        f"{r['confidence_1']:.3f} | {r['gap']:+.3f} [{r['gap_lo90']:+.3f}, {r['gap_hi90']:+.3f}] |"
        for k, r in rows.items()
    ]
    held, seen = rows["held-out prompts"], rows["training prompts"]
    explained = seen["gap"] < held["gap"] / 2 and seen["gap_hi90"] < held["gap_lo90"]
    verdict = "explains" if explained else "is not shown to explain"
    lines += ["", f"Over-fitting to the training prompts {verdict} most of the gap (rule above)."]
    text = "\n".join(lines) + "\n"
    (HERE / "seen_prompts.md").write_text(text)
    print(text)


if __name__ == "__main__":
    {"prompts": pick_prompts, "report": report}[sys.argv[1]]()
