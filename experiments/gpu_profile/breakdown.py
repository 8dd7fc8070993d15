"""Where an eager transformers step spends its GPU time: per-kernel totals at a few points.

Run 2 found the eager forward's kernels 1.3-19x the GPU-only estimate; this attributes that
gap (attention, GEMMs, elementwise, cache copies). Same model and cache as `dsim profile
--device cuda`. Run on the GPU machine:
    python experiments/gpu_profile/breakdown.py --out breakdown.json
Off a GPU it runs on the CPU with a tiny config (a check of the script itself):
    python experiments/gpu_profile/breakdown.py --model TINY_CONFIG.json --device cpu --out x.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from dsim.hardware import zoo  # noqa: E402
from dsim.hardware.measure import build_model, filled_cache  # noqa: E402

# (phase, R sequences, q tokens each, context before the step): a launch-bound point, the
# q = 1 -> 2 jump at long context, a large verify batch, and a compute-bound prefill.
POINTS = [
    ("verify", 1, 1, 512),
    ("verify", 16, 1, 2048),
    ("verify", 16, 2, 2048),
    ("verify", 64, 16, 2048),
    ("prefill", 4, 2048, 2048),
]
STEPS, TOP = 3, 12


def profile_point(model, phase: str, r: int, q: int, ctx: int, device) -> dict[str, float]:
    """Per-kernel device time (ms per step) of one point, largest first."""
    config = model.config
    cached = ctx if phase == "verify" else ctx - q
    shape = (r, config.num_key_value_heads, cached, zoo.head_dim(config))
    base = torch.randn(shape, device=device, dtype=model.dtype)
    ids = torch.randint(config.vocab_size, (r, q), device=device)
    cache = filled_cache(config, base, r)
    keep = 0 if phase == "verify" else 1

    def step() -> None:
        with torch.inference_mode():
            model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=keep)
        cache.crop(-q)

    for _ in range(2):
        step()
    cuda = device.type == "cuda"
    activity = torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU
    with torch.profiler.profile(activities=[activity]) as prof:
        for _ in range(STEPS):
            step()
        if cuda:
            torch.cuda.synchronize()
    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    totals: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == kind:
            us = e.self_device_time_total if cuda else e.self_cpu_time_total
            totals[e.name[:90]] = totals.get(e.name[:90], 0.0) + us / 1e3 / STEPS
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-8b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = build_model(zoo.load_config(args.model), device, dtype)
    result = {}
    for phase, r, q, ctx in POINTS:
        kernels = profile_point(model, phase, r, q, ctx, device)
        label = f"{phase} R={r} q={q} ctx={ctx}"
        result[label] = {"total_ms": sum(kernels.values()), "kernels_ms": kernels}
        print(f"\n{label}: {sum(kernels.values()):.2f} ms of kernels per step", flush=True)
        for name, ms in list(kernels.items())[:TOP]:
            print(f"  {ms:8.3f}  {name}")
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
