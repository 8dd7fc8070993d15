"""dsim's prediction for vLLM's adaptive verification on DeepSeek-V3 fp8, 8x H200 (TP 8, EP 8),
closed loop, under the rule in prediction_rule.md (committed before any number of it); writes
prediction.md beside this file.

    PYTHONPATH=. .venv/bin/python experiments/adaptive/prediction.py      # a few minutes

Each cell is one `dsim run` (the command a user types), paired seeds per policy. What it
builds in is said in the rule: the engine preset `vllm`, the MTP drafter's estimate, the stated
acceptance and spreads, fixed 800/600-token requests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from dsim.cpu import cpu_name
from dsim.fileio import write_with

DIR = Path(__file__).resolve().parent
ROOT = DIR.parent.parent
PROFILE = "profiles/h200x8-deepseek-v3-fp8-roofline.csv"
DRAFT = "profiles/h200x8-deepseek-v3-fp8-mtp-roofline.csv"
# The rule's acceptance with the spreads and noise it copied in from experiments/confidence.
ACCEPTANCE = (
    "positions:0.80,0.72,0.66,0.62,0.58,0.55,0.52[spread=1.125,spread_req=0.422,noise=1.592]"
)
CONCURRENCY = (1, 16, 32, 64, 128, 256)
POLICIES = ("ar", "fixed:1", "fixed:3", "fixed:5", "fixed:6", "fixed:7", "vllm-adaptive")
SEEDS = (0, 1, 2)
METRICS = (("steady_throughput_tok_s", "throughput tok/s"), ("tps_p50", "per-user tok/s p50"))
ACCEPTED = "accepted_length_mean"  # tokens a round, the bonus token included


def command(policy: str, c: int, seed: int, out: Path, kind: str = "ar") -> list[str]:
    """The `dsim run` of one cell: fixed:K drafts K tokens (num_speculative_tokens K);
    vllm-adaptive drafts 7 and verifies the prefix its rule picks; ar drafts nothing. `kind`
    is the drafter's (the rule's: `ar`, one MTP pass a draft; `block`: one pass a round)."""
    gamma = policy.split(":")[1] if policy.startswith("fixed:") else "7"
    n = max(4 * c, 64)
    trace = f"synthetic:concurrency={c},n={n},prompt=800,output=600,sigma=0"
    cmd = [sys.executable, "-m", "dsim", "run", "--profile", PROFILE, "--policy", policy]
    cmd += ["--trace", trace, "--seed", str(seed), "--out", str(out), "--no-progress"]
    if policy != "ar":
        cmd += ["--draft-cost", DRAFT, "--drafter-kind", kind, "--gamma", gamma]
        cmd += ["--acceptance", ACCEPTANCE]
    return cmd


def run_cell(policy: str, c: int, seed: int, scratch: Path, kind: str) -> dict[str, float]:
    out = scratch / f"{policy.replace(':', '-')}-c{c}-s{seed}"
    cmd = command(policy, c, seed, out, kind)
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{policy} C={c} seed {seed}: {done.stderr.strip()[-400:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {key: float(summary[key]) for key in (*(k for k, _ in METRICS), ACCEPTED)}


def table(results: dict, key: str) -> list[str]:
    """One metric: mean [min, max] over seeds per (C, policy), ratios to ar and the best fixed."""
    head = "| C | " + " | ".join(POLICIES) + " | adaptive / ar | adaptive / best fixed (K) |"
    lines = [head, "|" + " --- |" * (len(POLICIES) + 3)]
    for c in CONCURRENCY:
        cells, means = [], {}
        for p in POLICIES:
            xs = [results[(p, c, s)][key] for s in SEEDS]
            means[p] = statistics.fmean(xs)
            cells.append(f"{means[p]:.1f} [{min(xs):.1f}, {max(xs):.1f}]")
        best = max((p for p in POLICIES if p.startswith("fixed:")), key=means.__getitem__)
        a = means["vllm-adaptive"]
        lines.append(
            f"| {c} | " + " | ".join(cells) + f" | {a / means['ar']:.3f} | "
            f"{a / means[best]:.3f} ({best}) |"
        )
    return lines


def accepted(results: dict) -> list[str]:
    """Mean tokens a round per (C, policy), mean over seeds: what a scheduler's trimming costs."""
    spec = [p for p in POLICIES if p != "ar"]
    lines = ["| C | " + " | ".join(spec) + " |", "|" + " --- |" * (len(spec) + 1)]
    for c in CONCURRENCY:
        means = [statistics.fmean(results[(p, c, s)][ACCEPTED] for s in SEEDS) for p in spec]
        cells = [f"{m:.2f}" for m in means]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return lines


def orderings(results: dict, key: str) -> list[str]:
    lines = []
    for c in CONCURRENCY:
        mean = {p: statistics.fmean(results[(p, c, s)][key] for s in SEEDS) for p in POLICIES}
        lines.append(f"- C = {c}: " + " > ".join(sorted(POLICIES, key=mean.__getitem__)[::-1]))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="prediction.md", help="beside this script")
    parser.add_argument(
        "--drafter-kind",
        choices=("ar", "block"),
        default="ar",
        help="ar: the rule's (one MTP pass a draft); block: one pass a round, a post-hoc "
        "diagnostic (published.md), not the prediction",
    )
    args = parser.parse_args()
    out, kind = DIR / args.out, args.drafter_kind
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    cpu = cpu_name()
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (c, p, s) in enumerate(
            (c, p, s) for c in CONCURRENCY for p in POLICIES for s in SEEDS
        ):
            print(f"[{i + 1}/{len(CONCURRENCY) * len(POLICIES) * len(SEEDS)}] C={c} {p} seed {s}")
            results[(p, c, s)] = run_cell(p, c, s, Path(tmp), kind)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    flags = "" if kind == "ar" else f" --drafter-kind {kind}"
    status = (
        "No published result was read before this file was committed."
        if kind == "ar"
        else "**Not a prediction**: a post-hoc diagnostic run after the published results were "
        "read (`published.md`), the rule's setup with one drafter setting changed; no term changed."
    )
    title = "Prediction" if kind == "ar" else "Post-hoc diagnostic (not a prediction)"
    lines = [
        f"# {title}: adaptive verification on DeepSeek-V3 fp8, 8x H200, vLLM (closed loop)",
        "",
        "Made by `experiments/adaptive/prediction.py` under `prediction_rule.md` (committed "
        "before any number of it). Command: `PYTHONPATH=. .venv/bin/python "
        f"experiments/adaptive/prediction.py{flags} --out {out.name}`. Commit {commit}. "
        f"Machine: {cpu}. Started {started}, load average at the end {load}. Engine `vllm` "
        f"(engine v2), profile `{PROFILE}`, drafter `{DRAFT}` (`--drafter-kind {kind}`), "
        f"acceptance `{ACCEPTANCE}`. Each cell: mean over seeds 0-2 [min, max]. {status}",
    ]
    for key, name in METRICS:
        lines += ["", f"## {name} (`{key}`)", "", *table(results, key), "", "Ordering (mean):"]
        lines += orderings(results, key)
    lines += ["", f"## accepted length (`{ACCEPTED}`, tokens a round)", "", *accepted(results)]
    text = "\n".join(lines) + "\n"
    write_with(out, lambda f: Path(f).write_text(text))
    print(text)


if __name__ == "__main__":
    main()
