"""`dsim validate`: the simulator's predictions against real-model runs of the same workload.

One small Poisson workload is served three ways per policy:
1. real mode with the wall clock (the truth);
2. simulation with the measured CPU profile, the acceptance trace of the same drafter and a
   drafter profile measured here on the real drafter (the "trace" model);
3. simulation with the same profile and drafter cost but a parametric acceptance preset.
Both simulations get the real run's exact arrivals, prompt lengths and generated lengths, so
the errors isolate the step-time model and the acceptance model. `diagnostics.json` checks the
step-time model alone (its prediction for the real run's own batches vs their measured time),
for the given profile and for a profile of real mode's own verify step (`dsim.real.profile`),
and repeats the trace simulation clocked by the latter.
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
from dsim.hardware.commands import CPU_BATCH_TOKENS, CPU_SEQS, parse_ints
from dsim.hardware.latency import LatencyModel, write_profile
from dsim.hardware.measure import Grid
from dsim.policies import parse_policy
from dsim.real.profile import measure_real_profile
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
    profile: Path
    preset: str = "preset:dspark:chat"
    policies: tuple[str, ...] = POLICIES
    requests: int = 32
    rate: float = 0.5  # Poisson arrivals per second
    max_new_tokens: int = 64
    max_seqs: int = 16
    seed: int = 0
    target: str = "smollm2-135m"
    step_profile_contexts: tuple[int, ...] = (128, 512)  # () skips the real-step profile


def measure_drafter_profile(drafter, target, out: Path, repeats: int = 7) -> pd.DataFrame:
    """Median wall time of the real drafter's batched pass at R sequences; written as a
    drafter profile (batch_tokens = R, one context: the drafter reads no KV cache)."""
    import torch

    from dsim.models.drafters import time_draft

    rows = []
    for r in DRAFTER_BATCHES:
        times = time_draft(drafter, target.hidden_size, r, repeats)
        p10, p50, p90 = np.percentile(times * 1e3, [10, 50, 90])
        rows.append((r, 0, p50, r, p10, p90))
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
    Context per sequence is approximated from the step's KV blocks (the log keeps no more)."""
    latency = LatencyModel.from_csv(profile)
    draft = DraftCost(profile=LatencyModel.from_csv(draft_profile))
    steps = run.result.steps
    seqs = steps.num_running + (steps.prefill_tokens > 0)
    ctx = steps.kv_blocks_used * EngineConfig.block_size / np.maximum(seqs, 1)
    drafting = parse_policy(run.spec.policy).drafts
    predicted = np.array(
        [
            (draft.seconds(int(r), c, latency) if r and drafting else 0.0)
            + float(latency.latency(int(b), c))
            for r, b, c in zip(steps.num_running, steps.batch_tokens, ctx, strict=True)
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

    threads = profile_threads(s.profile)
    if threads:
        torch.set_num_threads(threads)
    target, drafter = load_models(s.target, s.drafter)
    draft_profile = out / "drafter-profile.csv"
    measure_drafter_profile(drafter, target, draft_profile)
    step_profile = out / "real-step-profile.csv"
    if s.step_profile_contexts:
        log("measuring the real-mode verify step on the profile grid")
        grid = Grid(
            parse_ints(CPU_BATCH_TOKENS, "batch tokens"),
            parse_ints(CPU_SEQS, "seqs"),
            s.step_profile_contexts,
        )
        measure_real_profile(target, drafter, grid, step_profile)
    trace = f"synthetic:rate={s.rate},cv=1,n={s.requests},output={s.max_new_tokens},sigma=0"
    base = RunSpec(
        trace=trace,
        profile=str(s.profile),
        gamma=drafter.gamma,
        seed=s.seed,
        max_seqs=s.max_seqs,
        draft_cost=str(draft_profile),
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
            "step_model": step_model_check(run, s.profile, draft_profile),
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
        if s.step_profile_contexts:  # the same trace simulation, clocked by the real step
            diag = diagnostics[policy]
            diag["step_model_real_step"] = step_model_check(run, step_profile, draft_profile)
            sim_spec = replace(spec, acceptance=str(s.acceptance), calibration="raw")
            sim_spec = replace(sim_spec, profile=str(step_profile))
            backend = Simulated(parse_acceptance(str(s.acceptance), drafter.gamma, "raw"))
            sim = run_engine(sim_spec, work, backend)
            diag["trace_real_step_profile"] = compare(run.result.summary, sim.summary)
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
