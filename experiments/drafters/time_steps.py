"""Seconds per training step of each drafter kind at the target's width, on a synthetic cache
of the right shapes (step cost does not depend on the values), for planning training runs.

Prints wall and CPU seconds per step (CPU = the wall time on an idle core, 1 thread).
Usage: python experiments/drafters/time_steps.py [--steps 15] [--batch-size 64] [--kinds ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from dsim.models.data import TrainCache
from dsim.models.target import load_target
from dsim.models.train import TrainSettings, train_drafter


def synthetic_cache(target, sequences: int = 40, length: int = 150, context: int = 16):
    """Random states with the shapes `dsim prepare-data` writes (layers 2 and 15 + final)."""
    gen = torch.Generator().manual_seed(0)
    h, n = target.hidden_size, sequences * (context + length)
    hidden = torch.nn.functional.rms_norm(torch.randn(n, h, generator=gen), (h,))
    lse = torch.logsumexp(hidden @ target.lm_head_weight.T, -1)
    return TrainCache(
        hidden=hidden,
        layers=torch.randn(n, 2, h, generator=gen).half(),
        lse=lse,
        token=torch.randint(0, 8192, (n,), generator=gen),
        offsets=torch.arange(sequences + 1) * (context + length),
        answer_start=torch.full((sequences,), context),
        domains=["chat"] * sequences,
        ids=[str(i) for i in range(sequences)],
        fingerprint=target.fingerprint,
        layer_ids=(2, 15),
        final_layer=int(target.model.config.num_hidden_layers),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=16)
    parser.add_argument("--kinds", nargs="+", default=["markov", "parallel", "ar", "rnn", "mtp1"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target()
    cache = synthetic_cache(target, context=args.context)
    settings = TrainSettings(
        steps=args.steps, batch_size=args.batch_size, warmup=1, context=args.context
    )
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            out, state = Path(tmp) / f"{kind}.pt", Path(tmp) / f"{kind}.state.pt"
            stats = train_drafter(kind, 7, cache, target, settings, out, state, resume=False)
            print(
                f"{kind}: wall {stats['seconds_per_step']:.3f} s/step, "
                f"cpu {stats['cpu_seconds_per_step']:.3f} s/step, "
                f"{stats['parameters'] / 1e6:.2f} M parameters, "
                f"checkpoint {out.stat().st_size / 1e6:.1f} MB",
                flush=True,
            )


if __name__ == "__main__":
    main()
