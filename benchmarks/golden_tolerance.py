"""How far the golden tests' floats move across CPU kernel paths: the measurement behind
`PROJ_TOL` in tests/real/test_real_golden.py.

One machine can run the kernel paths other machines of the kind run: ATen picks its vectorised
kernels by `ATEN_CPU_CAPABILITY` (avx512, avx2, default) and MKL its GEMMs by
`MKL_ENABLE_INSTRUCTIONS` (AVX512, AVX2, SSE4_2) or `MKL_CBWR` (COMPATIBLE: its
generic path). An AMD EPYC without AVX-512 runs the AVX2 paths.
Each path runs the golden tests with a probe in place of their comparison; the probe records, for
every float digest, the largest projection difference over the golden norm, and whether every
integer field (tokens, accepted counts) is equal. The tolerance should sit above the largest
deviation with margin and far below what a change of behaviour moves.

    .venv/bin/python benchmarks/golden_tolerance.py      # about 2 minutes on two cores
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATHS = {  # kernel path -> environment that selects it
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "sse4.2": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "mkl-compatible": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
}
RECORD_ENV = "DSIM_GOLDEN_PROBE"


def pytest_collection_finish(session) -> None:
    """Plug-in half (`-p golden_tolerance`): record each comparison instead of asserting it."""
    golden = sys.modules["test_real_golden"]
    out = Path(os.environ[RECORD_ENV])

    def probe(got, expected) -> bool:
        floats = golden.is_floats(expected) and expected != []
        row = {"floats": floats}
        row |= {"deviation": golden.deviation(got, expected)} if floats else {}
        row |= {} if floats else {"equal": got == expected}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return True

    golden.same = probe


def measure(name: str, env: dict[str, str]) -> dict:
    """Run the golden tests on one kernel path; summarise what the probe saw."""
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "rows.jsonl"
        record.touch()
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "golden_tolerance"]
        cmd += ["tests/real/test_real_golden.py", "-k", "not tolerance"]
        pythonpath = os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT / "tests")])
        full = {**os.environ, **env, RECORD_ENV: str(record), "PYTHONPATH": pythonpath}
        done = subprocess.run(cmd, cwd=ROOT, env=full, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{name}: the golden tests failed to run\n{done.stdout[-2000:]}")
        rows = [json.loads(line) for line in record.read_text().splitlines()]
    devs = [r["deviation"] for r in rows if r["floats"]]
    return {
        "path": name,
        "float digests": len(devs),
        "moved": sum(d > 0 for d in devs),
        "max deviation": max(devs),
        "integer fields": sum(not r["floats"] for r in rows),
        "integer fields differing": sum(not r.get("equal", True) for r in rows),
    }


def main() -> None:
    results = [measure(name, env) for name, env in PATHS.items()]
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
