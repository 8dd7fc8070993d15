"""What the compiled round costs a process before its first step: compiling (the first run on a
machine) and loading from the on-disk cache (every later process).

Each child process imports dsim, then runs the same short simulation twice (dspark, then
fixed:3, on the first 30 s of the Azure conv trace); the first pass pays for compiling or
loading every kernel the engine calls, the second for none, so their difference is that cost.
The first child gets an empty cache folder (`NUMBA_CACHE_DIR`: it compiles and writes), the
next ones the same folder (they load), so the repository's own cache is left as it is.
Run: .venv/bin/python benchmarks/compile_cost.py [--loads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TRACE = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
PROFILE_2023 = "profiles/h200-qwen3-8b-vllm2023-roofline.csv"


def passes() -> dict:
    """The child: import time and the two passes' wall times."""
    start = time.perf_counter()
    from dsim.run import RunSpec, simulate

    imported = time.perf_counter()
    walls = []
    for _ in range(2):
        t = time.perf_counter()
        for policy in ("dspark", "fixed:3"):
            simulate(RunSpec(trace=TRACE, window="0:30", policy=policy, profile=PROFILE_2023))
        walls.append(time.perf_counter() - t)
    return {
        "import_s": round(imported - start, 2),
        "first_pass_s": round(walls[0], 2),
        "second_pass_s": round(walls[1], 2),
        "kernels_s": round(walls[0] - walls[1], 2),
    }


def child(cache: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child"]
    env = {"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin", "NUMBA_CACHE_DIR": str(cache)}
    out = subprocess.run(cmd, cwd=HERE, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=2, help="processes that load the cache")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(passes()))
        return
    with tempfile.TemporaryDirectory(prefix="compile_cost.") as tmp:
        for k in range(1 + args.loads):
            what = "compile" if k == 0 else "load"
            result = child(Path(tmp))
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"{what}: {json.dumps(result)} [load {load}]", flush=True)


if __name__ == "__main__":
    main()
