"""Probe of the one-sequence cells' price bias (issue 55, after v43): which part of a real
decode step, by its cell, departs from its price?

A real decode step's wall time W is the drafter's pass D, the target's pass T (forward, LM head,
softmax) and the rest O (engine, sampling, rejection, bookkeeping). The step model prices them
k x (drafter profile + target profile) + o(R, V). This serves the first 4 served-half prompts
for real (64 tokens each, `max_seqs` 1: every decode step holds one sequence, as a light load's
nearly all do) under mtp1, fixed:4 and dspark in turn, three cycles (after one untimed request
per policy: its first round compiles kernels), scheduled by v43's engine profiles, times D and T
inside every step (`TimedBackend`'s clocks, no reference passes) and prints per policy and cell
(1, q): steps, mean W, D, T, O, and T and D over v43's raw profiles' prices at the step's own
context (`LatencyModel.step`, the drafter profile at R = 1). The studies found the step model's
error per cell (1, 1) +0.7..+3.8%, (1, 2) -0.1..-1.4%, (1, 5) +0.3..+2.0% (v40-v43): a part
whose ratio to its price moves that way between cells is where the bias is. Last, per cycle
(policies served a minute apart, so the machine's drift mostly cancels): T over its price for
fixed:4's (1, 5) over mtp1's (1, 2), and dspark's (1, 2) over its (1, 1).
Usage, from the repository root, with v43's trimmed study restored from the git history:
git archive f026812 experiments/validation/v43 | tar -x
PYTHONPATH=. .venv/bin/python experiments/validation/probe_steps.py > probe_steps.txt
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dsim.engine.config import EngineConfig
from dsim.hardware.latency import LatencyModel
from dsim.models.data import read_prompt_file, write_prompt_file
from dsim.real.runner import load_models, run_real
from dsim.run_spec import RunSpec
from dsim.validation.plan import arrivals_spec, served_prompts
from dsim.validation.settings import Settings
from dsim.validation.step_check import TimedBackend

STUDY = Path("experiments/validation/v43")
REQUESTS, TOKENS, CYCLES = 4, 64, 3
POLICIES = ("mtp1", "fixed:4", "dspark")


class StepTimes(TimedBackend):
    """`TimedBackend` keeping each round's drafter and target seconds (wall clock)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list[tuple[float, float, int]] = []  # (draft s, target s, verify tokens)
        self._draft_s = 0.0

    def draw(self, idx, rng):
        before = self.model_s
        out = super().draw(idx, rng)
        self._draft_s = self.model_s - before
        return out

    def verify(self, idx, lengths, truth):
        before = self.model_s
        out = super().verify(idx, lengths, truth)
        self.rounds.append((self._draft_s, self.model_s - before, int(len(idx) + lengths.sum())))
        return out


def policy_steps(
    policy: str, target, drafter, prompts: Path, requests: int = REQUESTS, tokens: int = TOKENS
) -> pd.DataFrame:
    """One policy's decode steps: cell, context, W, D, T."""
    spec = RunSpec(
        trace=arrivals_spec(1e3, requests, tokens),
        profile=str(STUDY / "profile-engine.csv"),
        gamma=drafter.gamma,
        max_seqs=1,
        draft_cost=str(STUDY / "drafter-profile-engine.csv"),
        drafter_kind="block",
        fused_prefill=False,
        policy=policy,
    )
    run = run_real(spec, target, drafter, prompts, "wall", tokens, make_backend=StepTimes)
    steps = run.result.steps
    decode = np.flatnonzero((steps.prefill_tokens == 0) & (steps.num_running > 0))
    rounds = np.array(run.backend.rounds)
    if len(rounds) != len(decode) or not np.array_equal(rounds[:, 2], steps.batch_tokens[decode]):
        raise RuntimeError("rounds and decode steps do not line up")
    return pd.DataFrame(
        {
            "policy": policy,
            "tokens": steps.batch_tokens[decode],
            "context": steps.kv_blocks_used[decode] * EngineConfig.block_size,
            "W": steps.latency_s[decode],
            "D": rounds[:, 0],
            "T": rounds[:, 1],
        }
    )


def main() -> None:
    torch.set_num_threads(1)
    s = Settings()
    target, drafter = load_models(s.target, s.drafter)
    price = LatencyModel.from_csv(STUDY / "profile.csv")
    draft_price = LatencyModel.from_csv(STUDY / "drafter-profile.csv")
    d1 = float(draft_price.latency(drafter.gamma, 1, 0.0))
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        write_prompt_file(prompts, served_prompts(read_prompt_file(s.prompts))[:REQUESTS])
        for policy in POLICIES:  # untimed: a policy's first round compiles its kernels
            policy_steps(policy, target, drafter, prompts, 1, 8)
        frames = [
            policy_steps(p, target, drafter, prompts).assign(cycle=c)
            for c in range(CYCLES)
            for p in POLICIES
        ]
    df = pd.concat(frames)
    df["T_price"] = [
        float(price.step(int(b), 1, float(c)))
        for b, c in zip(df["tokens"], df["context"], strict=True)
    ]
    df["O"] = df["W"] - df["D"] - df["T"]
    df["T_ratio"] = df["T"] / df["T_price"]
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()}")
    print(f"# {REQUESTS} served-half prompts x {TOKENS} tokens, max_seqs 1, per policy; ms")
    cells = df.groupby(["policy", "tokens"]).agg(
        steps=("W", "size"),
        W=("W", "mean"),
        D=("D", "mean"),
        T=("T", "mean"),
        O=("O", "mean"),
        T_price=("T_price", "mean"),
        context=("context", "mean"),
        T_ratio=("T_ratio", "mean"),
        T_ratio_se=("T_ratio", "sem"),
    )
    cells = cells[cells.steps >= 20]
    cells["D/price"] = cells["D"] / d1
    for col in ("W", "D", "T", "O", "T_price"):
        cells[col] *= 1e3
    print(cells.round(3).to_string())
    # per cycle, cells served minutes apart at most: T over its price, one cell over another
    by = df.groupby(["cycle", "policy", "tokens"])["T_ratio"].mean()
    pairs = {
        "fixed:4 (1, 5) / mtp1 (1, 2)": [
            by[c, "fixed:4", 5] / by[c, "mtp1", 2] for c in range(CYCLES)
        ],
        "dspark (1, 2) / dspark (1, 1)": [
            by[c, "dspark", 2] / by[c, "dspark", 1] for c in range(CYCLES)
        ],
    }
    for name, values in pairs.items():
        print(
            f"T over price, {name}: per cycle {np.round(values, 4).tolist()}, "
            f"mean {np.mean(values):.4f} sd {np.std(values, ddof=1):.4f}"
        )


if __name__ == "__main__":
    main()
