"""Replay the whole Azure conv trace (19,366 requests, ~58 min) with fixed:3 and oracle.

Prints wall time (and CPU time, which other processes on the machine do not inflate),
simulated steps per wall-second, time per step and peak memory of each run. Each run is a
fresh process, so its peak RSS is its own. Target: under 20 s and 1 GB per run.

`--compare COMMIT` checks COMMIT out into a temporary worktree and runs it (A) and this
checkout (B) alternately, A B A B, on the same policy, then prints each pair's ratio B/A of
wall and CPU time per step (steps from the run's summary, since model changes may change
their number). Alternating pairs keep a machine whose load drifts from favouring one side.
Each side first makes one discarded run: a fresh checkout's first process compiles its numba
kernels.

The engine options below (`--profile`, `--kv-tokens`, ...) replace the defaults on both sides,
e.g. `benchmarks/vs_vidur.py`'s like-for-like run (its `--inputs` writes the cut trace and the
Llama-2-7B profile to benchmarks/.vidur-cache):
  bench_sim.py ar --trace benchmarks/.vidur-cache/conv_4096.csv
    --profile benchmarks/.vidur-cache/h100-llama2-7b-gpuonly.csv --kv-tokens 111616
    --max-seqs 128 --prefill-mixing mixed --max-num-batched-tokens 2048 --prefill-chunk 2048
Run: .venv/bin/python benchmarks/bench_sim.py [POLICY ...] [--compare 1e9b53c --pairs 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TRACE = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
HERE = Path(__file__).resolve().parent.parent
# The targets are set on the 2023-engine H200 Qwen3-8B estimate, so that a change of the
# default engine does not move them: a checkout that has it under this name runs on it, an
# older one (1e9b53c) on its own default profile, as the earlier comparisons did.
PROFILE_2023 = "profiles/h200-qwen3-8b-vllm2023-roofline.csv"
# RunSpec fields a run may set from the command line.
ENGINE_OPTIONS = {
    "profile": str,
    "kv_tokens": int,
    "max_seqs": int,
    "prefill_mixing": str,
    "max_num_batched_tokens": int,
    "prefill_chunk": int,
}


def pinned() -> dict:
    """The RunSpec profile keyword of the checkout in the working directory."""
    return {"profile": PROFILE_2023} if Path(PROFILE_2023).exists() else {}


def one(policy: str, trace: str, options: dict) -> dict:
    from dsim.run import RunSpec, simulate

    start, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(RunSpec(trace=trace, policy=policy, **(pinned() | options)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    s = result.summary
    return {
        "policy": policy,
        "requests": s["requests"],
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),  # robust to other processes sharing the cores
        "steps": s["steps"],
        "steps_per_wall_s": round(s["steps"] / wall),
        "us_per_step_wall": round(wall / s["steps"] * 1e6, 2),
        "us_per_step_cpu": round(cpu / s["steps"] * 1e6, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "throughput_tok_s": round(s["throughput_tok_s"], 1),
    }


def child(checkout: Path, policy: str, trace: str, options: dict) -> dict:
    """One run in a fresh process with `checkout`'s code on the path."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", policy, "--trace", trace]
    cmd += ["--options", json.dumps(options)]
    env = {"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(cmd, cwd=checkout, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def here(path: str) -> str:
    """A file given on the command line as an absolute path (each side runs in its own
    checkout); anything else (the default trace, a synthetic spec) as it is."""
    return str(Path(path).resolve()) if Path(path).is_file() and path != TRACE else path


def load() -> str:
    with open("/proc/loadavg") as f:
        return "load " + " ".join(f.read().split()[:3])


@contextmanager
def checkout(commit: str) -> Iterator[Path]:
    """COMMIT checked out in a temporary git worktree, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench_sim.") as tmp:
        base = Path(tmp) / "base"
        git = ["git", "-C", str(HERE), "worktree"]
        subprocess.run(
            [*git, "add", "--detach", str(base), commit], check=True, capture_output=True
        )
        try:
            yield base
        finally:
            subprocess.run([*git, "remove", "--force", str(base)], check=True)


def compare(commit: str, policy: str, trace: str, pairs: int, options: dict) -> None:
    with checkout(commit) as base:
        child(base, policy, trace, options), child(HERE, policy, trace, options)  # compiles
        ratios = []
        for k in range(pairs):
            a, b = child(base, policy, trace, options), child(HERE, policy, trace, options)
            for side, r in (("A " + commit, a), ("B this", b)):
                print(f"pair {k + 1} {side}: {json.dumps(r)} [{load()}]", flush=True)
            wall = b["us_per_step_wall"] / a["us_per_step_wall"]
            cpu = b["us_per_step_cpu"] / a["us_per_step_cpu"]
            ratios.append((wall, cpu))
            print(f"pair {k + 1} per-step ratio B/A: wall {wall:.3f}, cpu {cpu:.3f}", flush=True)
    walls, cpus = zip(*ratios, strict=True)
    print(
        f"{policy}: per-step B/A over {pairs} pairs: wall {min(walls):.3f}-{max(walls):.3f}, "
        f"cpu {min(cpus):.3f}-{max(cpus):.3f} (the target, against 1e9b53c: <= 0.5)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="*", default=["fixed:3", "oracle"])
    parser.add_argument("--trace", default=TRACE)
    parser.add_argument("--compare", metavar="COMMIT", help="time against COMMIT, A B A B")
    parser.add_argument("--pairs", type=int, default=2)
    for name, kind in ENGINE_OPTIONS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, help="RunSpec." + name)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--options", type=json.loads, default={}, help=argparse.SUPPRESS)
    args = parser.parse_args()
    options = args.options or {k: getattr(args, k) for k in ENGINE_OPTIONS}
    options = {k: v for k, v in options.items() if v is not None}
    if "profile" in options:
        options["profile"] = here(options["profile"])
    trace = args.trace if args.child else here(args.trace)
    if args.child:
        print(json.dumps(one(args.child, trace, options)))
    elif args.compare:
        for policy in args.policies:
            compare(args.compare, policy, trace, args.pairs, options)
    else:
        for policy in args.policies:
            print(json.dumps(child(HERE, policy, trace, options)), f"[{load()}]", flush=True)


if __name__ == "__main__":
    main()
