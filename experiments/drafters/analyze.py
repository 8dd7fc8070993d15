"""Evidence for the drafter family on SmolLM2-135M: accepted length per drafter and domain,
position-wise conditional acceptance, per-round drafter latency, calibration before/after STS.

Reads the traces `dsim collect` wrote (traces/acceptance/smollm2-KIND.parquet) and the
checkpoints in drafters/; writes tables and figures beside this file.
Usage: python experiments/drafters/analyze.py [--skip-latency] [--skip-calibration]
       [--suffix=-greedy]   (traces smollm2-KIND-greedy.parquet; outputs get the suffix too)
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dsim.acceptance.trace import read_acceptance_trace  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KINDS = ("ar", "parallel", "markov", "rnn", "mtp1")
MAIN_DOMAINS = ("code", "math", "chat")
MIN_ROUNDS = 20  # positions reached by fewer rounds are too noisy to plot
PAIRS = (("markov", "parallel"), ("markov", "ar"))  # the paper's claims
# the 8,000-step drafters trained on 221k tokens and their traces, shipped until the 300k-token
# ones replace them (data300k.py): reports about them read this commit, not the working tree
SHIPPED_8000 = "971733a"


def trace_path(kind: str, suffix: str = "") -> Path:
    return REPO / "traces" / "acceptance" / f"smollm2-{kind}{suffix}.parquet"


def trace_at(commit: str, kind: str, suffix: str = "") -> pd.DataFrame:
    """A trace as committed at `commit` (the shipped files are replaced as drafters train on)."""
    path = trace_path(kind, suffix).relative_to(REPO).as_posix()
    blob = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True, check=True
    ).stdout
    return pd.read_parquet(io.BytesIO(blob))


def first_position_gap(df: pd.DataFrame) -> float:
    """Mean first-position confidence minus first-position acceptance: the head's bias there."""
    return float(df["conf_1"].mean() - (df["accepted"] >= 1).mean())


def write_report(stem: str, text: str, results: dict) -> None:
    """An experiment's report: HERE/STEM.md (the table) and HERE/STEM.json (its numbers)."""
    (HERE / f"{stem}.md").write_text(text)
    (HERE / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(text)


def difference_cell(d: dict[str, float]) -> str:
    """A `tau_difference` as a table cell: point [90% interval]."""
    return f"{d['difference']:+.3f} [{d['lo90']:+.3f}, {d['hi90']:+.3f}]"


def tau_difference(
    a: pd.DataFrame, b: pd.DataFrame, reps: int = 2000, seed: int = 0
) -> dict[str, float]:
    """tau(a) - tau(b) on the same prompts, with a 90% bootstrap interval that resamples
    sequences (paired: both drafters decoded the same prompts), tau = 1 + accepted / rounds."""
    per = [df.groupby("seq_id")["accepted"].agg(["sum", "count"]) for df in (a, b)]
    common = per[0].index.intersection(per[1].index)
    acc = [p.loc[common, "sum"].to_numpy(float) for p in per]
    rounds = [p.loc[common, "count"].to_numpy(float) for p in per]
    pick = np.random.default_rng(seed).integers(0, len(common), size=(reps, len(common)))
    boot = [x[pick].sum(1) / r[pick].sum(1) for x, r in zip(acc, rounds, strict=True)]
    diff = boot[0] - boot[1]
    point = acc[0].sum() / rounds[0].sum() - acc[1].sum() / rounds[1].sum()
    lo, hi = np.percentile(diff, [5, 95])
    return {"difference": float(point), "lo90": float(lo), "hi90": float(hi), "n": len(common)}


def accepted_length_table(traces: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """tau = 1 + mean accepted prefix (all drafts verified), per drafter x domain."""
    rows = {}
    for kind, df in traces.items():
        tau = 1 + df.groupby("domain")["accepted"].mean()
        tau["all"] = 1 + df["accepted"].mean()
        rows[kind] = tau
    return pd.DataFrame(rows).T.round(3)


def conditional_acceptance(df: pd.DataFrame) -> pd.DataFrame:
    """P(draft k accepted | drafts 1..k-1 accepted), and the mean soft label tv_k on the same
    rounds (a lower-variance estimate of the same quantity), per domain and position."""
    gamma = int(df["gamma"].iloc[0])
    out = []
    for domain, part in [*df.groupby("domain"), ("all", df)]:
        acc = part["accepted"].to_numpy()
        for k in range(1, gamma + 1):
            reached = acc >= k - 1
            out.append(
                {
                    "domain": domain,
                    "position": k,
                    "rounds": int(reached.sum()),
                    "accept": float((acc[reached] >= k).mean()) if reached.any() else np.nan,
                    "tv": float(part[f"tv_{k}"].to_numpy()[reached].mean())
                    if reached.any()
                    else np.nan,
                    "conf": float(part[f"conf_{k}"].to_numpy()[reached].mean())
                    if reached.any()
                    else np.nan,
                }
            )
    return pd.DataFrame(out)


def plot_conditional(cond: pd.DataFrame, path: Path) -> None:
    domains = [d for d in (*MAIN_DOMAINS, "all") if d in set(cond["domain"])]
    fig, axes = plt.subplots(1, len(domains), figsize=(4 * len(domains), 3.4), sharey=True)
    for ax, domain in zip(np.atleast_1d(axes), domains, strict=True):
        shown = cond[(cond["domain"] == domain) & (cond["rounds"] >= MIN_ROUNDS)]
        for kind, part in shown.groupby("drafter", sort=False):
            line = ax.plot(part["position"], part["tv"], marker="o", label=kind)[0]
            ax.plot(part["position"], part["accept"], ls=":", color=line.get_color())
        ax.set_title(domain)
        ax.set_xlabel("draft position k")
        ax.set_xticks(sorted(set(cond["position"])))
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("P(k accepted | 1..k-1 accepted)")
    np.atleast_1d(axes)[-1].legend(fontsize=8)
    fig.suptitle(
        "SmolLM2-135M drafters, held-out prompts, T=1 (solid: mean 1-TV, dotted: empirical;"
        f" positions reached by >= {MIN_ROUNDS} rounds)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def drafter_latency(kinds: list[str], reps: int = 30) -> pd.DataFrame:
    """The shipped drafters' draft times (`draft_times`) and the target's verify times."""
    from dsim.models.target import load_target

    target = load_target()
    rows = draft_times({kind: REPO / "drafters" / f"{kind}.pt" for kind in kinds}, target, reps)
    rows += verify_latency(target, reps)
    return pd.DataFrame(rows)


def draft_times(files: dict[str, Path], target, reps: int = 30) -> list[dict]:
    """Median wall time of one `draft` call (gamma tokens) at batch 1 and 16, 1 CPU thread,
    per named checkpoint."""
    import torch

    from dsim.models.checkpoint import load_drafter
    from dsim.models.drafters import time_draft

    torch.set_num_threads(1)
    rows = []
    for kind, path in files.items():
        drafter = load_drafter(path, target)
        for batch in (1, 16):
            times = time_draft(drafter, target.hidden_size, batch, reps)
            rows.append(
                {
                    "drafter": kind,
                    "batch": batch,
                    "gamma": drafter.gamma,
                    "median_ms": 1e3 * float(np.median(times)),
                    "p10_ms": 1e3 * float(np.percentile(times, 10)),
                    "p90_ms": 1e3 * float(np.percentile(times, 90)),
                }
            )
    return rows


def verify_latency(target, reps: int, context: int = 256) -> list[dict]:
    """For scale: one target verify pass over 1 + 7 tokens per sequence, KV context 256."""

    from dsim.models.ragged import RaggedTarget

    rows = []
    for batch in (1, 16):
        times = []
        for _ in range(max(3, reps // 5)):
            passes = RaggedTarget(target)
            passes.prefill([[1] * context] * batch, 8)
            start = time.perf_counter()
            passes.probs(passes.forward(list(range(batch)), [[1] * 8] * batch))
            times.append(time.perf_counter() - start)
        rows.append(
            {
                "drafter": "target verify (1+7 tokens)",
                "batch": batch,
                "gamma": 7,
                "median_ms": 1e3 * float(np.median(times)),
                "p10_ms": 1e3 * float(np.percentile(times, 10)),
                "p90_ms": 1e3 * float(np.percentile(times, 90)),
            }
        )
    return rows


def calibration(kinds: list[str], suffix: str = "") -> pd.DataFrame:
    """STS on each trace (30% of sequences held out): ECE/AUC before and after, per position."""
    from dsim.acceptance.calibrate import calibrate_trace

    rows = []
    for kind in kinds:
        out = HERE / "calibration" / f"{kind}{suffix}"
        report = calibrate_trace(trace_path(kind, suffix), out, holdout=0.3, seed=0)
        for m in report["metrics"]:
            rows.append({"drafter": kind, **m})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-calibration", action="store_true")
    parser.add_argument("--suffix", default="", help="trace name suffix, e.g. -greedy")
    args = parser.parse_args()
    sfx = args.suffix
    kinds = [k for k in KINDS if trace_path(k, sfx).exists()]
    traces = {k: read_acceptance_trace(trace_path(k, sfx))[0] for k in kinds}
    tau = accepted_length_table(traces)
    tau.to_csv(HERE / f"accepted_length{sfx}.csv")
    diffs = {
        f"{a}-{b}": tau_difference(traces[a], traces[b])
        for a, b in PAIRS
        if a in traces and b in traces
    }
    print("tau differences, 90% bootstrap interval over sequences:", json.dumps(diffs, indent=1))
    cond = pd.concat(
        [conditional_acceptance(df).assign(drafter=k) for k, df in traces.items()],
        ignore_index=True,
    )
    cond.to_csv(HERE / f"conditional_acceptance{sfx}.csv", index=False)
    plot_conditional(cond[cond["drafter"] != "mtp1"], HERE / f"conditional_acceptance{sfx}.png")
    summary = {"accepted_length": json.loads(tau.to_json()), "tau_differences": diffs}
    print("accepted length tau (1 + mean accepted prefix, all drafts verified):")
    print(tau.to_string())
    main_cond = cond[cond["domain"].isin([*MAIN_DOMAINS, "all"]) & (cond["position"] <= 4)]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(
            main_cond.pivot_table(
                index=["domain", "drafter"], columns="position", values=["tv", "accept", "rounds"]
            ).round(3)
        )
    if not args.skip_latency:
        latency = drafter_latency(kinds)
        latency.to_csv(HERE / "latency.csv", index=False)
        print(latency.to_string(index=False))
    if not args.skip_calibration:
        cal = calibration(kinds, sfx)
        cal.to_csv(HERE / f"calibration{sfx}.csv", index=False)
        cols = [
            "drafter",
            "position",
            "ece_before",
            "ece_after",
            "ece_after_noise_p95",
            "auc_before",
        ]
        print(cal[[c for c in cols if c in cal.columns]].to_string(index=False))
    (HERE / f"summary{sfx}.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
