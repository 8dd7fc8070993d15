"""The scheduler's answer on engine v2: vllm-adaptive, dspark and dspark-async against the best
fixed K and MTP-1, dense and MoE, on three engines, closed loop at three loads (README.md, the
comparison's rule); writes compare.md and results.csv beside this file.

    PYTHONPATH=. .venv/bin/python experiments/adaptive/compare.py [--jobs 2] [--redo SETUP POLICY]

Finished points are cached under points/ (not tracked) and read back on a re-run.
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
from dsim.report import markdown_table  # noqa: E402
from dsim.run_spec import RunSpec  # noqa: E402
from dsim.sla import Sla  # noqa: E402
from experiments.closed_loop import ENGINES as DENSE  # noqa: E402
from experiments.closed_loop import client  # noqa: E402

ENGINES = ("vllm", "sglang", "gpu-only")
MOE = {
    "vllm": "profiles/h200x8-deepseek-v3-fp8-roofline.csv",
    "sglang": "profiles/h200x8-deepseek-v3-fp8-sglang-roofline.csv",
    "gpu-only": "profiles/h200x8-deepseek-v3-fp8-gpuonly-roofline.csv",
}
MTP = "profiles/h200x8-deepseek-v3-fp8-mtp-roofline.csv"
ASSUMED, MEASURED = "preset:dspark:chat", "preset:dspark:chat[noise=1.592]"
SETUPS = {  # setup -> (profile per engine, drafter options, acceptances, KV tokens)
    "dense": (DENSE, {"draft_cost": "ratio:0.1"}, (ASSUMED, MEASURED), 750_000),
    "moe": (MOE, {"draft_cost": MTP, "drafter_kind": "ar"}, (MEASURED,), None),
}
FIXED = ("fixed:1", "fixed:2", "fixed:3", "fixed:5", "fixed:7")
SCHEDULERS = ("dspark", "dspark-async", "vllm-adaptive")
POLICIES = ("mtp1", *FIXED, *SCHEDULERS)
LOADS = {"light": 4, "moderate": 32, "heavy": 256}
SEEDS = (0, 1, 2)
COLUMNS = ["tps_p50", "throughput_tok_s", "mean_verify_budget", "unstable"]


def gamma(policy: str) -> int:
    """Drafts a round: fixed:K drafts K (num_speculative_tokens K), the schedulers 7."""
    return int(policy.split(":")[1]) if policy.startswith("fixed:") else 7


def cells() -> list[tuple[dict, RunSpec]]:
    out = []
    for setup, (profiles, drafter, acceptances, kv) in SETUPS.items():
        for engine in ENGINES:
            for acceptance in acceptances:
                for load, n in LOADS.items():
                    for policy in POLICIES:
                        for seed in SEEDS:
                            label = {
                                "setup": setup,
                                "engine": engine,
                                "acceptance": acceptance,
                                "load": load,
                                "policy": policy,
                                "seed": seed,
                            }
                            spec = RunSpec(
                                trace=client(n),
                                profile=profiles[engine],
                                acceptance=acceptance,
                                policy=policy,
                                gamma=gamma(policy),
                                seed=seed,
                                max_seqs=n,
                                kv_tokens=kv,
                                **drafter,
                            )
                            out.append((label, spec))
    return out


def run(jobs: int, redo: tuple[str, str] | None = None) -> pd.DataFrame:
    """Every cell's summary; with `redo` (setup, policy) only those cells are run, and their
    rows replace the same rows of the committed results.csv (the rest read from it)."""
    todo = cells()
    if redo is not None:
        todo = [(lab, spec) for lab, spec in todo if (lab["setup"], lab["policy"]) == redo]
    points = make_points((lab["policy"], LOADS[lab["load"]], spec) for lab, spec in todo)
    start = time.monotonic()

    def progress(done: int) -> None:
        print(f"{done}/{len(points)} runs, {(time.monotonic() - start) / 60:.1f} min", flush=True)

    summaries = run_sweep(points, HERE / "points", "local", jobs, progress=progress)
    table = pd.concat([pd.DataFrame([lab for lab, _ in todo]), summaries[COLUMNS]], axis=1)
    if redo is not None:
        keys = list(todo[0][0])
        old = pd.read_csv(HERE / "results.csv", keep_default_na=False).set_index(keys)
        old.loc[table.set_index(keys).index, COLUMNS] = table.set_index(keys)[COLUMNS]
        table = old.reset_index()
    table["excluded"] = ""
    for _, part in table.groupby(["setup", "engine", "acceptance"], sort=False):
        table.loc[part.index, "excluded"] = exclusions(part, Sla())
    return table


def ratio(part: pd.DataFrame, column: str, policy: str, baseline: tuple[str, ...]) -> str:
    """`policy` over the best of `baseline` in each seed: mean [min..max], `~` if not called."""
    wide = part.pivot_table(index="seed", columns="policy", values=column)
    r = wide[policy] / wide[list(baseline)].max(axis=1)
    mark = "" if r.min() > 1 or r.max() < 1 else " ~"
    return f"x{r.mean():.3f} [{r.min():.3f}..{r.max():.3f}]{mark}"


def best_fixed(part: pd.DataFrame, column: str) -> str:
    """The best fixed length in each seed (the same in every seed: one name)."""
    wide = part.pivot_table(index="seed", columns="policy", values=column)[list(FIXED)]
    return "/".join(sorted(set(wide.idxmax(axis=1))))


def report(table: pd.DataFrame) -> str:
    counted = table[table["excluded"] == ""]
    lines = [
        "# Adaptive verification on engine v2: the schedulers against the best fixed K",
        "",
        "Rule: README.md (committed before these results). Each cell: per seed (0-2), the "
        "scheduler's value over the best fixed length's in that seed, mean [min..max]; `~` = "
        "not called (the seeds disagree on the side of 1). Excluded by the overload rule: "
        f"{int((table['excluded'] != '').sum())} of {len(table)} runs.",
    ]
    groups = counted.groupby(["setup", "acceptance"], sort=False)
    for metric, name in (("tps_p50", "per-user speed p50"), ("throughput_tok_s", "throughput")):
        for (setup, acceptance), part in groups:
            lines += ["", f"## {name}: {setup}, `{acceptance}`", ""]
            rows = []
            for engine in ENGINES:
                for load in LOADS:
                    cell = part[(part["engine"] == engine) & (part["load"] == load)]
                    rows.append(
                        [engine, load, best_fixed(cell, metric)]
                        + [ratio(cell, metric, p, FIXED) for p in SCHEDULERS]
                        + [ratio(cell, metric, "vllm-adaptive", ("mtp1",))]
                    )
            head = ["engine", "load", "best fixed", *(f"{p} / best fixed" for p in SCHEDULERS)]
            lines.append(markdown_table([*head, "vllm-adaptive / mtp1"], rows))
    lines += ["", "## Verify budget (tokens verified per request per round, mean over seeds)", ""]
    budget = counted.groupby(["setup", "acceptance", "engine", "load", "policy"], sort=False)
    wide = budget["mean_verify_budget"].mean().unstack("policy")[list(POLICIES)].round(2)
    rows = [[", ".join(map(str, key)), *map(str, wide.loc[key].tolist())] for key in wide.index]
    lines.append(markdown_table(["setup, acceptance, engine, load", *POLICIES], rows))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--redo", nargs=2, metavar=("SETUP", "POLICY"),
                        help="re-run only these cells (e.g. moe mtp1), the rest read from "
                        "results.csv")  # fmt: skip
    args = parser.parse_args()
    table = run(args.jobs, tuple(args.redo) if args.redo else None)
    write_with(HERE / "results.csv", lambda tmp: table.to_csv(tmp, index=False))
    text = report(table)
    write_with(HERE / "compare.md", lambda tmp: tmp.write_text(text))
    print(text)


if __name__ == "__main__":
    main()
