"""`dsim validate`: the simulator's predictions against real-model runs.

The held-out prompts are split by row (`dsim.validation.plan`): the acceptance trace's rows
on the even rows drive the simulations, real mode serves the odd rows. The target is profiled
on this machine right before the real runs (unless a profile is given), and so is the drafter
(`dsim.validation.profiles`); then bursts of requests per policy on the trace half's prompts
calibrate the profiles to the engine (`dsim.validation.bursts`, `dsim.validation.step_check`:
a factor on the passes and an overhead per step that grows with its sequences and verify
tokens, which the simulations and the rate rule then use), and the same bursts re-served
after the last run measure the machine's drift.
Each load (a target busy fraction under `mtp1`; its rate from the simulator by the stated
rule) is repeated with different seeds (arrivals and sampling) and different served prompts
(repeat k starts k x requests prompts further into the served half), and each repeat serves
the same workload three ways per policy (`dsim.validation.runs`):
1. real mode with the wall clock (the truth);
2. simulation with the engine-calibrated profiles and the trace half (the "trace" model);
3. simulation with the same profiles and a parametric acceptance preset.
Both simulations get the real run's exact arrivals, prompt lengths and generated lengths.
`dsim.validation.figures` turns the runs into means and spread, errors, rankings, ratios,
targets and the error attribution (validation.json, comparison.json, diagnostics.json), and
`dsim.validation.report` into report.md.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.errors import InputError
from dsim.fileio import write_json, write_with
from dsim.models.data import Prompt, read_prompt_file, write_prompt_file
from dsim.run_spec import RunSpec
from dsim.validation.bench import Bench
from dsim.validation.bursts import (
    ENGINE_DRAFT_PROFILE,
    ENGINE_PROFILE,
    burst_calibration,
    calibrate_engine,
    describe,
    drift,
)
from dsim.validation.figures import attribution, comparisons, validation_json
from dsim.validation.plan import (
    arrivals_spec,
    generated_lengths,
    rate_for_load,
    repeat_order,
    served_prompts,
    trace_half,
    trace_prompts,
    write_trace_half,
)
from dsim.validation.profiles import measure_profiles
from dsim.validation.report import report_markdown
from dsim.validation.runs import one_run, utc
from dsim.validation.settings import Settings
from dsim.validation.step_check import EngineCalibration


def validate(s: Settings, out: Path, log: Callable[[str], None] = print) -> dict:
    """Every load x repeat x policy: a real run and its trace and preset simulations; writes
    the runs, the profiles, validation.json, comparison.json, diagnostics.json and report.md.
    Input errors are raised before anything is written."""
    s.check()
    prompts = read_prompt_file(s.prompts)
    served = served_prompts(prompts)
    half, trace_meta = trace_half(s.acceptance, s.prompts, len(prompts))
    bench = Bench.load(s, out, log)
    if int(half["gamma"].iloc[0]) != bench.drafter.gamma:
        raise InputError(
            s.acceptance, None, f"gamma differs from the drafter's {bench.drafter.gamma}"
        )
    meta = study_meta(s, len(served))
    trace_file = out / "trace-half.parquet"
    write_prompt_file(out / "prompts-served.jsonl", served)
    write_trace_half(half, trace_meta, s.acceptance, trace_file)
    profile, draft_profile, prompt_lengths = measure_profiles(bench, served)
    meta["profile"] = str(profile)
    raw = RunSpec(
        trace=arrivals_spec(1.0, s.requests, s.max_new_tokens),
        profile=str(profile),
        gamma=bench.drafter.gamma,
        seed=s.seed,
        max_seqs=s.max_seqs,
        draft_cost=str(draft_profile),
        drafter_kind="block",  # the real drafter's draft() is one call per round, any policy
        fused_prefill=False,  # the simulations model real mode's engine (`run_real`)
    )
    burst_prompts = trace_prompts(prompts)
    cal = calibrate_engine(bench, raw, burst_prompts)
    meta["engine_calibration"] = describe(cal)
    base = replace(
        raw, profile=str(out / ENGINE_PROFILE), draft_cost=str(out / ENGINE_DRAFT_PROFILE)
    )
    seeds = [s.seed + k for k in range(s.repeats)]
    expected_out = generated_lengths(half, s.max_new_tokens)
    plan = plan_loads(bench, base, str(trace_file), seeds, prompt_lengths, expected_out)
    measured = serve_all(bench, base, plan, seeds, served, str(trace_file), cal)
    log("re-measuring the engine on the same bursts (drift check)")
    end = burst_calibration(bench, raw, burst_prompts, "calibration-end")
    meta["wall_time"] = _clock(time.perf_counter() - bench.started)
    return write_results(bench, meta, plan, measured, drift(cal, end))


def machine() -> dict[str, str | int]:
    """What the real runs ran on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count() or 0, "platform": platform.platform()}


def study_meta(s: Settings, served: int) -> dict:
    """The report's header: when, on what, and what the study served."""
    import torch

    return {
        "command": "dsim validate",
        "date_utc": utc(),
        **machine(),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_start": " / ".join(f"{x:.2f}" for x in os.getloadavg()),
        "drafter": str(s.drafter),
        "acceptance_trace": f"{s.acceptance} (rows on the even rows of {s.prompts})",
        "served_prompts": f"odd rows of {s.prompts} ({served} prompts; repeat k from "
        f"prompt k x {s.requests} on)",
        "requests_per_run": s.requests,
        "max_new_tokens": s.max_new_tokens,
        "max_seqs": s.max_seqs,
        "repeats": s.repeats,
        "seeds": f"{s.seed}..{s.seed + s.repeats - 1} (arrivals and sampling)",
    }


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def plan_loads(
    bench: Bench,
    base: RunSpec,
    trace: str,
    seeds: list[int],
    prompt_lengths: np.ndarray,
    expected_out: np.ndarray,
) -> dict[str, dict[str, float]]:
    """Each load's rate by the rate rule, and the simulated busy fraction there."""
    s, plan = bench.settings, {}
    for name, busy in s.loads:
        rate, sim_busy = rate_for_load(
            busy, base, trace, seeds, s.requests, prompt_lengths, expected_out
        )
        plan[name] = {"busy_target": busy, "rate": rate, "sim_busy": sim_busy}
        bench.log(
            f"load {name}: mtp1 busy {busy:.3f} -> {rate:.4g} requests/s (sim {sim_busy:.3f})"
        )
    return plan


def serve_all(
    bench: Bench,
    base: RunSpec,
    plan: dict[str, dict[str, float]],
    seeds: list[int],
    served: list[Prompt],
    trace: str,
    cal: EngineCalibration,
) -> tuple[list[dict], list[dict], list[dict]]:
    """Every load x repeat x policy (`one_run`): metric rows, run info and attribution parts."""
    s, out = bench.settings, bench.out
    repeat_files = []
    for k, seed in enumerate(seeds):  # repeat k serves the served half from prompt k n on
        repeat_files.append(out / f"prompts-served-s{seed}.jsonl")
        order = repeat_order(len(served), k, s.requests)
        write_prompt_file(repeat_files[-1], [served[j] for j in order])
    rows, runs, parts = [], [], []
    total = len(s.loads) * len(seeds) * len(s.policies)
    runs_started = time.perf_counter()  # the ETA extrapolates the real runs, not the set-up
    for name, _ in s.loads:
        for seed, prompt_file in zip(seeds, repeat_files, strict=True):
            for policy in s.policies:
                bench.log(
                    _progress(bench, len(runs), total, runs_started, f"{name} seed {seed} {policy}")
                )
                spec = replace(
                    base,
                    trace=arrivals_spec(plan[name]["rate"], s.requests, s.max_new_tokens),
                    policy=policy,
                    seed=seed,
                )
                folder = out / "runs" / name / f"s{seed}"
                info, measured, part = one_run(bench, spec, prompt_file, trace, folder, cal)
                key = {"load": name, "seed": seed, "policy": policy}
                rows += [{**key, "kind": kind, **m} for kind, m in measured.items()]
                runs.append({**key, **info})
                parts.append({**key, **part})
    return rows, runs, parts


def _progress(bench: Bench, done: int, total: int, runs_started: float, what: str) -> str:
    """`[k/n] what (elapsed, ~ETA left)`: the ETA from the real runs done so far."""
    now = time.perf_counter()
    left = (now - runs_started) / done * (total - done) if done else None
    eta = f", ~{_clock(left)} left" if left is not None else ""
    return f"[{done + 1}/{total}] {what} ({_clock(now - bench.started)}{eta})"


def write_results(
    bench: Bench,
    meta: dict,
    plan: dict,
    measured: tuple[list[dict], list[dict], list[dict]],
    machine_drift: dict[str, float],
) -> dict:
    """validation.json, comparison.json, diagnostics.json and report.md; the report is also
    logged."""
    rows, runs, parts = measured
    out, frame = bench.out, pd.DataFrame(rows)
    results = validation_json(frame)
    comp = comparisons(frame)
    attr = attribution(pd.DataFrame(parts))
    write_json(out / "validation.json", results)
    write_json(
        out / "comparison.json", {"loads": plan, "by_load": comp, "machine_drift": machine_drift}
    )
    write_json(
        out / "diagnostics.json",
        {"meta": meta, "runs": runs, "attribution": attr.to_dict(orient="records")},
    )
    text = report_markdown(meta, plan, runs, results, comp, attr, machine_drift)
    write_with(out / "report.md", lambda tmp: tmp.write_text(text + "\n"))
    bench.log(text)
    return results
