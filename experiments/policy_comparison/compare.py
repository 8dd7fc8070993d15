"""Per-user speed and throughput of each policy at three concurrencies, on one engine (README.md).

Qwen3-8B on one H200 under an engine preset (`--engine`, experiments/closed_loop.py): a
closed-loop client at concurrency 4 / 32 / 256 against a server capped at the same number,
whose points are stable by construction (the overload rule is applied all the same and its
exclusions listed); the chat preset's acceptance and our markov drafter's measured trace, gamma
7. Then the cost of miscalibration: dspark on an over-confident drafter's trace, raw vs after
STS. Every cell runs with each of SEEDS, resumably (ENGINE/points/ caches finished points).
results.md shows the mean over seeds and its min..max; dspark is compared with the best fixed
length and with MTP-1 seed by seed (the same requests), a difference called only where every
seed puts it on the same side. `--ragged-penalty X` runs dspark alone at that penalty and
compares it with the engine's own fixed lengths (never ragged). brackets.md gathers every
engine run so far.

    python experiments/policy_comparison/compare.py --engine vllm [--ragged-penalty 0.381]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from dsim.fileio import write_with  # noqa: E402
from dsim.pareto.exclusion import exclusions  # noqa: E402
from dsim.pareto.sweep import make_points, run_sweep  # noqa: E402
from dsim.report import frame_table, markdown_table  # noqa: E402
from dsim.run_spec import RunSpec  # noqa: E402
from dsim.sla import Sla  # noqa: E402
from experiments.closed_loop import ENGINES, client  # noqa: E402

POLICIES = ["mtp1", "fixed:2", "fixed:3", "fixed:5", "fixed:7", "dspark"]
LOADS = {"light": 4, "moderate": 32, "heavy": 256}
# Acceptance per domain: the paper's chat preset, and the measured trace of our markov drafter
# (dsim-drafter/2 on SmolLM2-135M, held-out prompts, temperature 1) with its STS calibration,
# replayed on the same Qwen3-8B step-time estimate: real acceptance shapes, not a real pairing.
DOMAINS = {
    "chat": {"acceptance": "preset:dspark:chat"},
    "markov (measured)": {
        "acceptance": "traces/acceptance/smollm2-markov.parquet",
        "calibration": "experiments/drafters/calibration/markov/calibration.json",
    },
}
OVERCONF = "experiments/policy_comparison/chat_overconf2.parquet"  # paths from the repo root
CONFIDENCES = {
    "raw (over-confident)": {"acceptance": OVERCONF, "calibration": "raw"},
    "after STS": {
        "acceptance": OVERCONF,
        "calibration": "experiments/policy_comparison/calibration/calibration.json",
    },
}  # and calibrated by construction: the chat domain's dspark cells
SEEDS = [0, 1, 2]
GAMMA, KV_TOKENS = 7, 750_000
COLUMNS = ["tps_p50", "throughput_tok_s", "mean_verify_budget", "mean_batch_size", "unstable"]


def cells(engine: str, ragged: float | None) -> list[tuple[dict, RunSpec]]:
    """(labels, spec) of every run: the domains' policies, then (engine's own run) the
    calibration check."""
    base = dict(gamma=GAMMA, kv_tokens=KV_TOKENS, profile=ENGINES[engine], ragged_penalty=ragged)
    policies = POLICIES if ragged is None else ["dspark"]
    groups = [(d, p, kw) for d, kw in DOMAINS.items() for p in policies]
    if ragged is None:
        groups += [(f"calibration: {c}", "dspark", kw) for c, kw in CONFIDENCES.items()]
    return [
        (
            {"domain": domain, "load": name, "max_seqs": n, "policy": policy, "seed": seed},
            RunSpec(trace=client(n), max_seqs=n, policy=policy, seed=seed, **base, **kw),
        )
        for domain, policy, kw in groups
        for name, n in LOADS.items()
        for seed in SEEDS
    ]


def run(engine: str, ragged: float | None, out: Path) -> pd.DataFrame:
    """Every cell (finished ones read back from out/points/), with the overload verdicts."""
    todo = cells(engine, ragged)
    points = make_points((lab["policy"], lab["max_seqs"], spec) for lab, spec in todo)
    start = time.monotonic()

    def progress(done: int) -> None:
        minutes = (time.monotonic() - start) / 60
        print(f"{out.name}: {done}/{len(points)} runs, {minutes:.1f} min", flush=True)

    summaries = run_sweep(points, out, "local", 1, progress=progress)
    table = pd.concat([pd.DataFrame([lab for lab, _ in todo]), summaries[COLUMNS]], axis=1)
    table["excluded"] = ""
    for _, part in table.groupby("domain", sort=False):
        table.loc[part.index, "excluded"] = exclusions(part, Sla())
    return table


def spread(values: pd.Series, fmt: str) -> str:
    return f"{values.mean():{fmt}} [{values.min():{fmt}}..{values.max():{fmt}}]"


def paired(table: pd.DataFrame, column: str, baseline: list[str]) -> str:
    """dspark over the best of `baseline` in each seed: mean [min..max], `~` if not called."""
    wide = table.pivot_table(index="seed", columns="policy", values=column)
    if "dspark" not in wide or not set(baseline) & set(wide):
        return "n/a"
    r = wide["dspark"] / wide[[p for p in baseline if p in wide]].max(axis=1)
    mark = "" if r.min() > 1 or r.max() < 1 else " ~"
    return f"x{r.mean():.3f} [{r.min():.3f}..{r.max():.3f}]{mark}"


def gains(table: pd.DataFrame) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(domain, load) -> dspark's speed over the best fixed length, its throughput over the
    best fixed length's, its speed over MTP-1."""
    fixed = [p for p in table["policy"].unique() if p.startswith("fixed:")]
    out, counted = {}, table[table["excluded"] == ""]
    for domain, load in ((d, ld) for d in table["domain"].unique() for ld in LOADS):
        part = counted[(counted["domain"] == domain) & (counted["load"] == load)]
        out[domain, load] = (
            paired(part, "tps_p50", fixed),
            paired(part, "throughput_tok_s", fixed),
            paired(part, "tps_p50", ["mtp1"]),
        )
    return out


def report(engine: str, ragged: float | None, table: pd.DataFrame) -> str:
    profile = ENGINES[engine]
    penalty = "the engine's own" if ragged is None else f"{ragged:g}"
    n = int((table.drop_duplicates(["domain", "load", "policy"])["excluded"] != "").sum())
    cells_run = len(table.drop_duplicates(["domain", "load", "policy"]))
    text = [
        f"# policy_comparison on {engine} (`{profile}`), ragged verify penalty {penalty}\n",
        f"Each cell: mean over seeds {SEEDS} [min..max]. {n} of {cells_run} policy-load cells "
        "excluded by the overload rule (docs/pareto.md).\n",
    ]
    main = table[~table["domain"].str.startswith("calibration")]
    for domain, part in main.groupby("domain", sort=False):
        text.append(f"## {domain}: per-user speed p50 / throughput (tok/s) / verify budget\n")
        rows = []
        for policy, g in part.groupby("policy", sort=False):
            row = [policy]
            for load in LOADS:
                c = g[g["load"] == load]
                flag = f" (excluded: {c['excluded'].iloc[0]})" if c["excluded"].iloc[0] else ""
                row.append(
                    f"{spread(c['tps_p50'], '.0f')} / {spread(c['throughput_tok_s'], '.0f')} / "
                    f"{c['mean_verify_budget'].mean():.2f}{flag}"
                )
            rows.append(row)
        text.append(markdown_table(["policy", *LOADS], rows) + "\n")
    rows = [[d, ld, *g] for (d, ld), g in gains(main).items()]
    header = ["domain", "load", "speed / best fixed", "throughput / best fixed", "speed / mtp1"]
    text += ["## dspark over the best fixed length (per seed) and MTP-1\n"]
    text.append(markdown_table(header, rows) + "\n")
    calib = table[table["domain"].str.startswith("calibration")]
    if len(calib):
        own = main[(main["domain"] == "chat") & (main["policy"] == "dspark")]
        calib = pd.concat([calib, own.assign(domain="calibration: calibrated by construction")])
        text.append("## dspark: what miscalibration costs (chat, overconf=2 drafter)\n")
        cal = calib.drop(columns=["seed", "policy", "excluded"]).groupby(["load", "domain"])
        text.append(frame_table(cal.mean(numeric_only=True).reset_index()))
    return "\n".join(text)


def read_results(path: Path) -> pd.DataFrame:
    """A results.csv as written (its empty `excluded` cells back as "", not NaN)."""
    table = pd.read_csv(path, dtype={"excluded": object})
    return table.assign(excluded=table["excluded"].fillna(""))


def folder(engine: str, ragged: float | None) -> Path:
    return HERE / (engine if ragged is None else f"{engine}-ragged{ragged:g}")


def brackets() -> str:
    """dspark over the best fixed length's speed, every engine and penalty run so far."""
    columns = {}
    for engine in ENGINES:
        own = folder(engine, None) / "results.csv"
        if not own.is_file():
            continue
        fixed = read_results(own)
        columns[engine] = gains(fixed[~fixed["domain"].str.startswith("calibration")])
        for label in sorted(p.name for p in HERE.glob(f"{engine}-ragged*")):
            other = HERE / label / "results.csv"
            if other.is_file():
                dspark = read_results(other)
                keep = fixed["policy"].str.startswith("fixed:")
                columns[label] = gains(pd.concat([fixed[keep], dspark]))
    if not columns:
        return "No engine has run.\n"
    keys = list(next(iter(columns.values())))
    rows = [[d, ld, *(col.get((d, ld), ("n/a",))[0] for col in columns.values())] for d, ld in keys]
    return (
        "# policy_comparison: dspark's per-user speed over the best fixed length, per engine\n\n"
        "Per seed, over the best of the engine's fixed lengths (ENGINE-raggedX: dspark at that "
        "ragged verify penalty, against the same fixed lengths); mean [min..max], `~` = not "
        "called.\n\n" + markdown_table(["domain", "load", *columns], rows) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=list(ENGINES), default="vllm")
    parser.add_argument("--ragged-penalty", type=float, default=None)
    args = parser.parse_args()
    out = folder(args.engine, args.ragged_penalty)
    table = run(args.engine, args.ragged_penalty, out)
    csv = table.to_csv(index=False, float_format="%.4g")
    write_with(out / "results.csv", lambda tmp: tmp.write_text(csv))
    own = folder(args.engine, None) / "results.csv"
    if args.ragged_penalty is not None and own.is_file():  # beside the engine's fixed lengths
        fixed = read_results(own)
        table = pd.concat([table, fixed[fixed["policy"].str.startswith("fixed:")]])
    text = report(args.engine, args.ragged_penalty, table)
    write_with(out / "results.md", lambda tmp: tmp.write_text(text))
    summary = brackets()
    write_with(HERE / "brackets.md", lambda tmp: tmp.write_text(summary))
    print(text + "\n" + summary)


if __name__ == "__main__":
    main()
