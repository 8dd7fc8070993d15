"""Same seed, same results: compare this checkout's simulations with another commit's, bit for bit.

Checks out COMMIT into a temporary git worktree, runs the same short simulations (every policy,
plus runs that exercise preemption, chunked prefill, an SLA and another acceptance model) in
both checkouts, each in its own process with its own code on the path, and compares the
requests tables and step logs exactly. Exit code 1 names every run that differs.
Run: .venv/bin/python benchmarks/check_same_results.py [--against 4a82b3a]
(4a82b3a: the commit the second round of issue 14's speed-ups started from; 1e9b53c, the first
round's, predates the step-time model changes, so its results differ by design.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

AZURE = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
POLICIES = ("ar", "mtp1", "fixed:3", "threshold:0.5", "goodput", "dspark", "dspark-async", "oracle")
PRESSURE = "synthetic:rate=12,duration=60,prompt=1500,output=400"
# Both sides run on this checkout's copy of the 2023-engine H200 Qwen3-8B estimate (the default
# profile before engine presets; its CSV bytes unchanged), so a change of the default engine
# does not read as a change of the simulator.
PROFILE = str(
    Path(__file__).resolve().parent.parent / "profiles/h200-qwen3-8b-vllm2023-roofline.csv"
)


def specs() -> dict[str, dict]:
    """Named RunSpec keyword sets: each policy on a window of the Azure trace, then edge cases."""
    out = {p: {"trace": AZURE, "window": "0:240", "policy": p} for p in POLICIES}
    out["preempt-fixed:5"] = {"trace": PRESSURE, "policy": "fixed:5", "kv_tokens": 40_000}
    out["preempt-dspark"] = {"trace": PRESSURE, "policy": "dspark", "kv_tokens": 40_000}
    out["chunked-dspark"] = {"trace": PRESSURE, "policy": "dspark", "prefill_chunk": 256}
    out["seqcap-goodput"] = {"trace": PRESSURE, "policy": "goodput", "max_seqs": 16}
    out["sla-dspark"] = {"trace": AZURE, "window": "0:120", "policy": "dspark", "sla_tps": 60.0}
    out["iid-fixed:7-seed3"] = {
        "trace": AZURE,
        "window": "0:120",
        "policy": "fixed:7",
        "acceptance": "iid:0.7",
        "seed": 3,
    }
    # Plain decoding as benchmarks/vs_vidur.py runs it: Sarathi-style chunked prefill under a
    # step token budget, KV pressure forcing preemption.
    sarathi = {"max_num_batched_tokens": 2048, "prefill_chunk": 2048, "prefill_mixing": "mixed"}
    out["sarathi-ar"] = {"trace": PRESSURE, "policy": "ar", "max_seqs": 128, **sarathi}
    out["sarathi-preempt-ar"] = {**out["sarathi-ar"], "kv_tokens": 40_000}
    # Clusters: a router that reads replica state at each arrival, and the prefill -> decode
    # hand-off over the KV link (replicas must not run past another's event).
    cluster = {"trace": AZURE, "window": "0:240"}
    out["replicas2-least-loaded-dspark"] = {**cluster, "replicas": 2, "router": "least-loaded"}
    out["replicas2-round-robin-fixed:3"] = {**cluster, "replicas": 2, "policy": "fixed:3"}
    out["disagg1:1-dspark"] = {**cluster, "disagg": "1:1"}
    out["disagg1:1-threshold"] = {**cluster, "disagg": "1:1", "policy": "threshold:0.5"}
    out["replicas2-least-loaded-ar"] = {**out["replicas2-least-loaded-dspark"], "policy": "ar"}
    out["disagg1:1-ar"] = {**cluster, "disagg": "1:1", "policy": "ar"}
    return out


def child(out: Path) -> None:
    """Run every spec with the code on sys.path; one .npz of results per spec."""
    from dsim.run import RunSpec, simulate

    for name, kw in specs().items():
        result = simulate(RunSpec(**{"profile": PROFILE, **kw}))
        cols = {f"req.{c}": result.requests[c].to_numpy() for c in result.requests.columns}
        steps = {f"step.{k}": np.asarray(v) for k, v in vars(result.steps).items()}
        np.savez(out / f"{name.replace(':', '_')}.npz", **cols, **steps)


def run_in(checkout: Path, out: Path) -> None:
    out.mkdir(parents=True)
    env = {"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(out)]
    subprocess.run(cmd, cwd=checkout, env=env, check=True)


def compare(a: Path, b: Path) -> list[str]:
    """Names of runs whose arrays differ (NaN equals NaN), with the first differing array."""
    bad = []
    for name in specs():
        fa, fb = (np.load(d / f"{name.replace(':', '_')}.npz") for d in (a, b))
        diff = [k for k in fa.files if k not in fb.files or not np.array_equal(fa[k], fb[k], True)]
        steps = len(fa["step.latency_s"])
        print(f"{name:22s} {steps:7d} steps  {'same' if not diff else 'DIFFERS: ' + diff[0]}")
        if diff:
            bad.append(name)
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="4a82b3a", help="commit to compare with")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="check_same.") as tmp:
        base = Path(tmp) / "base"
        git = ["git", "-C", str(here), "worktree"]
        subprocess.run([*git, "add", "--detach", str(base), args.against], check=True)
        try:
            run_in(base, Path(tmp) / "a")
            run_in(here, Path(tmp) / "b")
            bad = compare(Path(tmp) / "a", Path(tmp) / "b")
        finally:
            subprocess.run([*git, "remove", "--force", str(base)], check=True)
    print(f"{len(specs()) - len(bad)} of {len(specs())} runs identical to {args.against}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
