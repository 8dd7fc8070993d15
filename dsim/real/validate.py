"""`dsim validate`: the simulator's predictions against real-model runs of the same workload.

One small Poisson workload is served three ways per policy:
1. real mode with the wall clock (the truth);
2. simulation with a CPU profile of the target measured on this machine right before the runs
   (unless a profile is given), the acceptance trace of the same drafter and a drafter profile
   measured here on the real drafter (the "trace" model);
3. simulation with the same profile and drafter cost but a parametric acceptance preset.
Both simulations get the real run's exact arrivals, prompt lengths and generated lengths, so
the errors isolate the step-time model and the acceptance model. `diagnostics.json` checks the
step-time model alone (its prediction for the real run's own batches vs their measured time).
Real mode runs a step's prefill as its own pass after the verify pass, so its steps with
prefill work pay the per-pass cost twice where the model composes one fused pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.acceptance.sources import parse_acceptance
from dsim.engine.backend import Simulated
from dsim.engine.config import DraftCost, EngineConfig
from dsim.fileio import write_json, write_with
from dsim.hardware.latency import LatencyModel, write_profile
from dsim.hardware.measure import Grid
from dsim.policies import parse_policy
from dsim.real.profile import write_cpu_profile
from dsim.real.runner import RealRun, run_real, write_real_run
from dsim.report import frame_table
from dsim.run import RunSpec, run_engine, write_run
from dsim.workload import Workload

METRICS = ("throughput_tok_s", "tpot_p50_s", "ttft_p50_s", "accepted_length_mean")
POLICIES = ("mtp1", "fixed:4", "dspark")
DRAFTER_BATCHES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Settings:
    drafter: Path
    acceptance: Path  # the drafter's acceptance trace
    prompts: Path
    profile: Path | None  # None: profile the target on this machine before the real runs
    preset: str = "preset:dspark:chat"
    policies: tuple[str, ...] = POLICIES
    requests: int = 32
    rate: float = 0.5  # Poisson arrivals per second
    max_new_tokens: int = 64
    max_seqs: int = 16
    seed: int = 0
    target: str = "smollm2-135m"
    profile_contexts: tuple[int, ...] = (128, 256, 512)  # of the on-machine profile

    def profile_grid(self) -> Grid:
        """The on-machine profile's grid: R up to --max-seqs, 1..8 tokens per sequence."""
        seqs = tuple(sorted({r for r in (1, 4, 16, 64) if r < self.max_seqs} | {self.max_seqs}))
        return Grid(seqs, (1, 2, 4, 8), self.profile_contexts, (1, 4), (32, 128))


def measure_drafter_profile(drafter, target, out: Path, repeats: int = 7) -> pd.DataFrame:
    """Median wall time of the real drafter's batched draft() at R sequences; written as a
    drafter profile of one block pass per round (batch_tokens = R x gamma, num_seqs = R, one
    context: the drafter reads no KV cache), read with --drafter-kind block."""
    import torch

    from dsim.models.drafters import time_draft

    rows = []
    for r in DRAFTER_BATCHES:
        times = time_draft(drafter, target.hidden_size, r, repeats)
        p10, p50, p90 = np.percentile(times * 1e3, [10, 50, 90])
        rows.append((r * drafter.gamma, 0, p50, r, p10, p90))
    cols = ["batch_tokens", "context_len", "latency_ms", "num_seqs"]
    df = pd.DataFrame(rows, columns=[*cols, "latency_ms_p10", "latency_ms_p90"])
    meta = {
        "estimate": False,
        "method": "measured: wall time of the real drafter's draft() at R sequences",
        "model": str(getattr(drafter, "config", "drafter")),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
    }
    write_profile(df, out, meta)
    return df


def realized(run: RealRun) -> Workload:
    """The real run's workload with the lengths it actually generated (caps become exact)."""
    req = run.result.requests
    return Workload(
        req["arrival_s"].to_numpy(np.float64),
        req["prompt_tokens"].to_numpy(np.int64),
        req["output_tokens"].to_numpy(np.int64),
        "real run",
    )


def step_model_check(run: RealRun, profile: Path, draft_profile: Path) -> dict[str, float]:
    """The step-time model (target profile + drafter profile) on the real run's own batches:
    predicted vs measured busy time, for decode-only steps and for steps with prefill work.
    Context per sequence is approximated from the step's KV blocks (the log keeps no more),
    and a step's prefill work is taken as one sequence's."""
    latency = LatencyModel.from_csv(profile)
    draft = DraftCost(profile=LatencyModel.from_csv(draft_profile), kind="block")
    steps = run.result.steps
    prefilling = (steps.prefill_tokens > 0).astype(np.int64)
    ctx = (
        steps.kv_blocks_used
        * EngineConfig.block_size
        / np.maximum(steps.num_running + prefilling, 1)
    )
    drafting = parse_policy(run.spec.policy).drafts
    predicted = np.array(
        [
            (draft.seconds(int(r), run.spec.gamma, c, latency) if r and drafting else 0.0)
            + float(latency.step(int(b - p), int(r), c, int(p), int(k), c))
            for r, b, p, k, c in zip(
                steps.num_running,
                steps.batch_tokens,
                steps.prefill_tokens,
                prefilling,
                ctx,
                strict=True,
            )
        ]
    )
    out = {}
    for name, keep in (
        ("decode", steps.prefill_tokens == 0),
        ("with_prefill", steps.prefill_tokens > 0),
    ):
        real, pred = float(steps.latency_s[keep].sum()), float(predicted[keep].sum())
        out[f"{name}_steps"] = int(keep.sum())
        out[f"{name}_real_s"] = real
        out[f"{name}_predicted_s"] = pred
        out[f"{name}_error"] = (pred - real) / real if real else float("nan")
    return out


def compare(real: dict, sim: dict) -> dict[str, dict[str, float]]:
    return {
        m: {"real": real[m], "sim": sim[m], "error": (sim[m] - real[m]) / real[m]} for m in METRICS
    }


def validate(
    s: Settings, out: Path, log: Callable[[str], None] = print
) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Run every policy real + trace + preset; write runs, profiles and validation.json."""
    import torch

    from dsim.real.runner import load_models, profile_threads

    # The given profile's thread count, or 1 (real mode's) for the profile measured here.
    threads = profile_threads(s.profile) if s.profile is not None else 1
    if threads:
        torch.set_num_threads(threads)
    target, drafter = load_models(s.target, s.drafter)
    draft_profile = out / "drafter-profile.csv"
    measure_drafter_profile(drafter, target, draft_profile)
    profile = s.profile
    if profile is None:  # never clock a validation by another machine's profile
        profile = out / "profile.csv"
        log(f"profiling {s.target} on this machine ({profile})")
        write_cpu_profile(target, s.target, s.profile_grid(), profile, progress=False)
    trace = f"synthetic:rate={s.rate},cv=1,n={s.requests},output={s.max_new_tokens},sigma=0"
    base = RunSpec(
        trace=trace,
        profile=str(profile),
        gamma=drafter.gamma,
        seed=s.seed,
        max_seqs=s.max_seqs,
        draft_cost=str(draft_profile),
        drafter_kind="block",  # the real drafter's draft() is one call per round, any policy
    )
    results: dict = {}
    diagnostics: dict = {}
    for policy in s.policies:
        spec = replace(base, policy=policy)
        log(f"{policy}: real run (wall clock)")
        load_before = os.getloadavg()
        run = run_real(spec, target, drafter, s.prompts, "wall", s.max_new_tokens)
        load = {"load_average_before": load_before, "load_average_after": os.getloadavg()}
        name = policy.replace(":", "")
        write_real_run(run, out / "runs" / f"{name}-real")
        work = realized(run)
        diagnostics[policy] = {
            "step_model": step_model_check(run, profile, draft_profile),
            "real_run": {**load, "threads": torch.get_num_threads()},
        }
        results[policy] = {}
        for kind, source in (("trace", str(s.acceptance)), ("preset", s.preset)):
            calibration = "raw" if kind == "trace" else None  # real mode uses raw confidences
            sim_spec = replace(spec, acceptance=source, calibration=calibration)
            backend = Simulated(parse_acceptance(source, drafter.gamma, calibration))
            sim = run_engine(sim_spec, work, backend)
            write_run(sim, sim_spec, out / "runs" / f"{name}-{kind}")
            results[policy][kind] = compare(run.result.summary, sim.summary)
        log(table(results).to_string(index=False))
    write_json(out / "validation.json", results)
    write_json(out / "diagnostics.json", diagnostics)
    write_with(out / "validation.md", lambda tmp: tmp.write_text(frame_table(table(results))))
    return results


def table(results: dict) -> pd.DataFrame:
    """One row per policy, model and metric: real, simulated, relative error."""
    rows = [
        (policy, kind, metric, v["real"], v["sim"], v["error"])
        for policy, kinds in results.items()
        for kind, metrics in kinds.items()
        for metric, v in metrics.items()
    ]
    return pd.DataFrame(rows, columns=["policy", "model", "metric", "real", "sim", "error"])
