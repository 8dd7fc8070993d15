"""Real-mode overhead: the engine's own work per round vs the forward passes, at batch 16.

16 requests arrive at once (max 16 running) and decode with `dspark` through the real
backend. Every backend call is timed and split into forward passes (the drafter's pass and the
target's flattened pass with its LM head) and the backend's own bookkeeping (blocks, rejection
sampling, cache commits); the rest of each engine step (planning and commit) is the engine's
own work (admission, KV accounting, the policy, commits). Target: engine < 5% of the forward
passes.

Run: .venv/bin/python benchmarks/bench_real_overhead.py [--drafter CKPT] [--target tiny]
Without a checkpoint an untrained markov drafter of the default size stands in (its cost, not
its acceptance, matters here). Threads: as in the CPU profile's sidecar (2).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict

import numpy as np
import torch

from dsim.engine.replica import Replica
from dsim.hardware.latency import profile_metadata
from dsim.models.checkpoint import load_drafter
from dsim.models.data import Prompt
from dsim.models.drafters import Drafter, DrafterConfig
from dsim.models.target import load_target
from dsim.real.runner import profile_threads, run_real
from dsim.run import RunSpec
from dsim.validation.step_check import TimedBackend

PROFILE = "profiles/cpu-smollm2-135m.csv"
BATCH = 16


def time_engine_steps(spent: list[float]) -> None:
    """Wrap Replica.step (planning) and Replica.commit so each adds its wall time to `spent`."""
    for name in ("step", "commit"):
        original = getattr(Replica, name)

        def timed(self, at, _original=original):
            start = time.perf_counter()
            out = _original(self, at)
            spent.append(time.perf_counter() - start)
            return out

        setattr(Replica, name, timed)


class Timed(TimedBackend):
    """step_check's TimedBackend, its model time kept per step, plus the backend calls' time."""

    def __init__(self, *args, **kwargs) -> None:
        self.forward_s = defaultdict(float)  # step number -> seconds in model passes
        self.backend_s = defaultdict(float)  # step number -> seconds in backend calls
        self.running: dict[int, int] = {}  # step number -> running requests
        self.step = 0
        super().__init__(*args, **kwargs)

    def timed(self, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return super().timed(fn, *args, **kwargs)
        finally:
            self.forward_s[self.step] += time.perf_counter() - start

    def _timed(self, name: str, *args):
        start = time.perf_counter()
        out = getattr(super(), name)(*args)
        self.backend_s[self.step] += time.perf_counter() - start
        return out

    def draw(self, idx, rng):
        self.step += 1
        self.running[self.step] = len(idx)
        return self._timed("draw", idx, rng)  # the drafter's pass is timed as a model pass

    def verify(self, idx, lengths, truth):
        return self._timed("verify", idx, lengths, truth)

    def prefill(self, idx, tokens, done):
        return self._timed("prefill", idx, tokens, done)

    def released(self, idx):
        return self._timed("released", idx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafter", default=None)
    parser.add_argument("--tokens", type=int, default=48, help="output tokens per request")
    parser.add_argument("--policy", default="dspark")
    args = parser.parse_args()
    torch.set_num_threads(profile_threads(profile_metadata(PROFILE)) or torch.get_num_threads())
    target = load_target(args.target)
    if args.drafter:
        drafter = load_drafter(args.drafter, target)
    else:
        torch.manual_seed(0)
        config = DrafterConfig.default("markov", 7, target.hidden_size)
        vocab = torch.arange(min(4096, target.vocab_size))
        drafter = Drafter(config, vocab).attach(target.embedding.weight, target.lm_head_weight)
        drafter.eval()
    prompts = "/tmp/bench_real_prompts.jsonl"
    with open(prompts, "w") as fh:
        for i in range(BATCH):
            row = Prompt(f"p{i}", "chat", f"Write a short story about the number {i}.")
            fh.write(json.dumps(row.__dict__) + "\n")
    trace = f"synthetic:rate=1000,n={BATCH},output={args.tokens},sigma=0"
    spec = RunSpec(trace=trace, profile=PROFILE, policy=args.policy, max_seqs=BATCH)
    holder: dict[str, Timed] = {}

    def make(*a, **k):
        holder["b"] = Timed(*a, **k)
        return holder["b"]

    load_before = os.getloadavg()
    spent: list[float] = []
    time_engine_steps(spent)
    run = run_real(spec, target, drafter, prompts, "profile", args.tokens, make_backend=make)
    b = holder["b"]
    engine = sum(spent) - sum(b.backend_s.values())
    steps = run.result.summary["steps"]
    full = [s for s, r in b.running.items() if r == BATCH]
    forward_16 = np.mean([b.forward_s[s] for s in full])
    bookkeeping_16 = np.mean([b.backend_s[s] - b.forward_s[s] for s in full])
    result = {
        "target": args.target,
        "threads": torch.get_num_threads(),
        "policy": args.policy,
        "steps": steps,
        "steps_at_batch_16": len(full),
        "engine_ms_per_step": 1e3 * engine / steps,
        "forward_ms_per_step_at_16": 1e3 * forward_16,
        "backend_bookkeeping_ms_per_step_at_16": 1e3 * bookkeeping_16,
        "engine_over_forward": engine / steps / forward_16,
        "backend_bookkeeping_over_forward": bookkeeping_16 / forward_16,
        "accepted_length_mean": run.result.summary["accepted_length_mean"],
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
