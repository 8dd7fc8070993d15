"""The closed-loop client and the engine brackets of the SLA-tier and policy experiments.

A load here is a concurrency N measured as `vllm bench serve --max-concurrency N` measures it,
against a server whose cap on running requests is N too: N requests are always in flight (all
due at 0; a new one is sent when one finishes), with lengths resampled from the Azure 2023
conversation trace. The number in the system is N from the first send to the last, so the
queue cannot grow (the overload rule's first test, docs/pareto.md); nothing waits at the server
unless the KV cache admits fewer than N, and then a constant N - R waits, so TTFT cannot grow
either (its second test) once the first N sends are behind: `requests` keeps them within the
first tenth of the run, below the first fifth's median.

`sweep` runs a `dsim pareto` config whose load axis is `max_seqs` with each point's client tied
to its cap, through dsim's own resumable sweep, analysis, report and plots:

    python experiments/closed_loop.py experiments/sla_tiers/engines/vllm.toml \\
        --out experiments/sla_tiers/vllm --jobs 1
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsim.pareto.config import load_config  # noqa: E402
from dsim.pareto.pipeline import check_out, write_outputs  # noqa: E402
from dsim.pareto.sweep import make_points, run_sweep  # noqa: E402

# The engine brackets: one estimate of Qwen3-8B on one H200 per engine preset (profiles/README.md)
ENGINES = {
    "vllm": "profiles/h200-qwen3-8b-roofline.csv",
    "gpu-only": "profiles/h200-qwen3-8b-gpuonly-roofline.csv",
    "sglang": "profiles/h200-qwen3-8b-sglang-roofline.csv",
    "vllm-2023": "profiles/h200-qwen3-8b-vllm2023-roofline.csv",
}
LENGTHS = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
MIN_REQUESTS = 320  # the fewest requests a point measures (its median's sample)


def requests(concurrency: int) -> int:
    """Requests per point: ten times the concurrency, so the first N sends (all at 0, which
    see a shorter wait than the rest) are a tenth of the run, and at least MIN_REQUESTS."""
    return max(MIN_REQUESTS, 10 * concurrency)


def client(concurrency: int) -> str:
    """The trace spec of the closed-loop client at this concurrency."""
    return f"synthetic:n={requests(concurrency)},concurrency={concurrency},lengths={LENGTHS}"


def sweep(config: str, out: str, jobs: int) -> None:
    """The config's sweep with every point's client at its own cap, written as `dsim pareto`
    writes it (points.parquet, frontier.parquet, report.md, pareto.png, load.png)."""
    cfg = load_config(config)
    if cfg.load_axis != "max_seqs":
        raise SystemExit(f"{config}: the load axis must be max_seqs, got {cfg.load_axis}")
    specs = [
        (policy, load, replace(spec, trace=client(spec.max_seqs)))
        for policy, load, spec in cfg.specs()
    ]
    points, target = make_points(specs), Path(out)
    check_out(target)
    start = time.monotonic()

    def progress(done: int) -> None:
        minutes = (time.monotonic() - start) / 60
        print(f"{config}: {done}/{len(points)} points, {minutes:.1f} min", flush=True)

    table = run_sweep(points, target, "local", jobs, progress=progress)
    table.insert(1, "load_axis", cfg.load_axis)
    table.insert(2, "layout", [cfg.layout_of(p.spec) for p in points])
    write_outputs(cfg, table, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    sweep(args.config, args.out, args.jobs)


if __name__ == "__main__":
    main()
