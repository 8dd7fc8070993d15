"""Measure the serving-grade verify-step profile of a dense decoder (Qwen3-8B by default) on a
GPU: `dsim.models.gpu_profile` over R x q x C, random weights, CUDA graphs. Needs only torch and
this package (no pandas, numpy, transformers, simpy or network), so it runs on a bare GPU
machine from a checkout:

    python3 -m dsim.models.serving_profile --out $OUT/h200-qwen3-8b-serving.csv

`--device cpu --dtype float32` with a small grid runs the same code on a CPU (a smoke test).
Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
from pathlib import Path

import torch

from dsim.errors import InputError
from dsim.models.gpu_profile import VerifyGrid, profile_serving

MODULE = "dsim.models.serving_profile"
# Qwen3-8B's config.json fields (dsim.hardware.zoo's, checked equal by a test), read here
# without importing the zoo, so the device needs nothing but torch.
QWEN3_8B_CONFIG = Path(__file__).resolve().parent / "data" / "qwen3-8b-config.json"

SEQS = "1,2,4,8,16,32,64,128,256"
TOKENS = "1,2,3,4,5,6,7,8"
CONTEXTS = "512,1024,2048"  # R = 256 at C = 2048: 78 GB of KV cache + 16 GB of weights


def ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(x) for x in text.split(",")}))
    except ValueError:
        values = ()
    if not values or min(values) < (0 if option == "--contexts" else 1):
        raise InputError(
            None, None, f"{option}: expected a comma list of whole numbers, got {text!r}"
        )
    return values


def environment(device: str) -> str:
    line = f"python {platform.python_version()} torch {torch.__version__} cuda {torch.version.cuda}"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(None, None, f"--device {device}: no CUDA device visible to torch")
        props = torch.cuda.get_device_properties(0)
        line += f"; {props.name}, {props.total_memory / 2**30:.1f} GiB"
    return line


def device_options(p: argparse.ArgumentParser, deadline_s: float) -> None:
    """The options every device script takes: where it runs, in what dtype, how it times."""
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per point")
    p.add_argument("--warmup", type=int, default=3, help="eager calls before each capture")
    p.add_argument("--deadline-s", type=float, default=deadline_s, help="start no point after this")
    p.add_argument("--allow-math", action="store_true", help="let SDPA use its math path")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(QWEN3_8B_CONFIG), help="config.json")
    p.add_argument("--name", default="qwen3-8b", help="the model's name in the profile")
    p.add_argument("--seqs", default=SEQS, help="sequence counts R")
    p.add_argument("--tokens", default=TOKENS, help="tokens per sequence q")
    p.add_argument("--contexts", default=CONTEXTS, help="cached tokens per sequence C")
    device_options(p, deadline_s=240.0)
    p.add_argument("--out", required=True, help="profile CSV (NAME.json beside it)")
    args = p.parse_args(argv)
    try:
        print(environment(args.device), flush=True)
        fields = json.loads(Path(args.config).read_text())
        grid = VerifyGrid(ints(args.seqs, "--seqs"), ints(args.tokens, "--tokens"),
                    ints(args.contexts, "--contexts"))  # fmt: skip
        command = shlex.join(["python3", "-m", MODULE, *sys.argv[1:]])
        rows = profile_serving(
            fields, args.name, grid, args.out, device=args.device, dtype=args.dtype,
            repeats=args.repeats, warmup=args.warmup, deadline_s=args.deadline_s,
            allow_math=args.allow_math, command=command,
            progress=lambda line: print(line, flush=True),
        )  # fmt: skip
    except (InputError, OSError, json.JSONDecodeError) as exc:
        print(f"serving_profile: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {args.out} ({len(rows)} of {grid.size} points)")


if __name__ == "__main__":
    main()
