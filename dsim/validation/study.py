"""`dsim validate`: the simulator's predictions against real-model runs.

The held-out prompts are split by row (`dsim.validation.plan`): the acceptance trace's rows
on the even rows drive the simulations, real mode serves the odd rows. The target is profiled
on this machine right before the real runs (unless a profile is given), and so is the drafter
(`dsim.validation.profiles`); then bursts of requests per policy on the trace half's prompts
calibrate the profiles to the engine (`dsim.validation.bursts`, `dsim.validation.step_check`:
a factor on the passes and an overhead per step that grows with its sequences and verify
tokens, which the rate rule uses). The runs go a triple (load, seed: one run per policy) at a
time, each run's simulations priced step by step by the speed trace of the reference passes
timed inside it (`dsim.validation.reference`); a triple with a run whose core moved faster
than its trace can follow, beyond the tolerance, is re-run (`dsim.validation.drift`).
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

import pandas as pd

from dsim.cpu import cpu_name
from dsim.errors import InputError
from dsim.fileio import check_output_dir, write_json, write_with
from dsim.models.data import Prompt, read_prompt_file, write_prompt_file
from dsim.run_spec import RunSpec
from dsim.validation.bench import Bench
from dsim.validation.bursts import (
    ENGINE_DRAFT_PROFILE,
    ENGINE_PROFILE,
    calibrate_engine,
    describe,
)
from dsim.validation.drift import RERUNS_TOTAL, TripleDrift, verdict
from dsim.validation.figures import attribution, comparisons, validation_json
from dsim.validation.plan import (
    Repeats,
    arrivals_spec,
    generated_lengths,
    rate_for_load,
    repeat_order,
    run_busy_s,
    served_prompts,
    trace_half,
    trace_prompts,
    write_trace_half,
)
from dsim.validation.profiles import measure_profiles
from dsim.validation.report import report_markdown
from dsim.validation.runs import Pricing, one_run, utc
from dsim.validation.settings import Settings
from dsim.validation.step_check import PassClocks
from dsim.validation.timeline import Timeline, clock

# What marks a folder as a study's: the first file a study writes (not validation.json: keyed
# by policy, it carries no dsim mark, so a user's file of that name would pass for dsim's).
STUDY_OWNERS = ("prompts-served.jsonl",)


def validate(
    s: Settings, out: Path, log: Callable[[str], None] = print, clocks: PassClocks = PassClocks()
) -> dict:
    """Every load x repeat x policy: a real run and its trace and preset simulations, each
    run priced by the reference passes inside it (`dsim.validation.reference`); writes the
    runs, the profiles, validation.json, comparison.json, diagnostics.json and report.md.
    Input errors are raised before anything is written. `clocks` time the model passes."""
    s.check()
    requested = s.requests
    check_output_dir(out, STUDY_OWNERS)  # a study's folder (an interrupted one resumes) or new
    prompts = read_prompt_file(s.prompts)
    served = served_prompts(prompts)
    half, trace_meta = trace_half(s.acceptance, s.prompts, len(prompts))
    bench = Bench.load(s, out, log, clocks)
    if int(half["gamma"].iloc[0]) != bench.drafter.gamma:
        raise InputError(
            s.acceptance, None, f"gamma differs from the drafter's {bench.drafter.gamma}"
        )
    meta = study_meta(s, len(served))
    phases = _Phases()
    trace_file = out / "trace-half.parquet"
    write_prompt_file(out / "prompts-served.jsonl", served)
    write_trace_half(half, trace_meta, s.acceptance, trace_file)
    profile, draft_profile, prompt_lengths, extra_s = measure_profiles(bench, served)
    phases.mark("load and profile")
    timeline = study_timeline(bench, phases.seconds["load and profile"] - extra_s)
    bench = sized_runs(bench, timeline)
    s = bench.settings
    meta |= {**run_sizes(s, len(served)), "requests_asked": requested, "profile": str(profile)}
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
    cal = calibrate_engine(bench, raw, trace_prompts(prompts))
    pricing = Pricing(cal, bench.reference.take())
    meta["engine_calibration"] = describe(cal)
    meta["reference_calibration"] = pricing.reference.record()
    phases.mark("calibrate")
    timeline.phase_done("calibrate")
    seeds = [s.seed + k for k in range(s.repeats)]
    expected_out = generated_lengths(half, s.max_new_tokens)
    base = replace(
        raw, profile=str(out / ENGINE_PROFILE), draft_cost=str(out / ENGINE_DRAFT_PROFILE)
    )
    repeats = Repeats(tuple(seeds), s.requests, prompt_lengths, expected_out)
    plan = plan_loads(bench, base, str(trace_file), repeats)
    phases.mark("rate rule")
    timeline.phase_done("rate rule")
    bench.log(timeline.weigh_loads({name: p["run_busy_s"] for name, p in plan.items()}))
    measured, records = serve_all(
        bench, base, plan, (seeds, served), str(trace_file), pricing, timeline
    )
    phases.mark("triples (runs and simulations)")
    meta["wall_time"] = clock(time.perf_counter() - bench.started)
    meta["time_by_phase"] = phases.describe()
    meta["projected_total"] = timeline.summary()
    return write_results(bench, meta, plan, measured, verdict(records), timeline.history)


def study_timeline(bench: Bench, profile_s: float) -> Timeline:
    """The study's projection from its profiling phase (`dsim.validation.timeline`), logged:
    the later phases scale with the policies (calibration bursts) and the tokens a run serves.
    `profile_s` leaves out the profile's focus rounds and the drafter passes before its
    verify points: the phase's shares were measured without them, and they are work the later
    phases do not scale with."""
    s, default = bench.settings, Settings()
    runs = {name: s.repeats * len(s.policies) for name, _ in s.loads}
    timeline = Timeline(bench.started, 60 * s.budget_minutes, runs)
    calibrate = len(s.policies) / len(default.policies)
    run = s.requests * s.max_new_tokens / (default.requests * default.max_new_tokens)
    bench.log(timeline.after_profiling(profile_s, calibrate, run))
    return timeline


def sized_runs(bench: Bench, timeline: Timeline) -> Bench:
    """The bench with runs of the requests the first projection fits in the budget
    (`Timeline.sized_requests`), said in the log (the report's header gives both counts)."""
    s = bench.settings
    requests = timeline.sized_requests(s.requests)
    if requests == s.requests:
        return bench
    bench.log(
        f"runs sized to {requests} requests (of {s.requests}) to fit the budget: "
        + timeline.record("after sizing the runs")
    )
    return replace(bench, settings=replace(s, requests=requests))


class _Phases:
    """Where a study's time goes: seconds per phase, in order."""

    def __init__(self) -> None:
        self.last, self.seconds = time.perf_counter(), {}

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase], self.last = now - self.last, now

    def describe(self) -> str:
        return ", ".join(f"{phase} {clock(t)}" for phase, t in self.seconds.items())


def machine() -> dict[str, str | int]:
    """What the real runs ran on."""
    return {"cpu": cpu_name(), "cores": os.cpu_count() or 0, "platform": platform.platform()}


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
        **run_sizes(s, served),
        "max_new_tokens": s.max_new_tokens,
        "max_seqs": s.max_seqs,
        "repeats": s.repeats,
        "seeds": f"{s.seed}..{s.seed + s.repeats - 1} (arrivals and sampling)",
        "simulation_draws": f"{s.draws} per simulated run (acceptance seeds: the run's, then "
        "their own); the simulated values are their mean",
    }


def run_sizes(s: Settings, served: int) -> dict:
    """The header's lines that depend on the requests a run serves."""
    return {
        "served_prompts": f"odd rows of {s.prompts} ({served} prompts; repeat k from "
        f"prompt k x {s.requests} on)",
        "requests_per_run": s.requests,
    }


def plan_loads(
    bench: Bench, base: RunSpec, trace: str, repeats: Repeats
) -> dict[str, dict[str, float]]:
    """Each load's rate by the rate rule, the simulated busy fraction there and a run's
    simulated busy seconds (over the policies: the projection's weight for the load)."""
    s, plan = bench.settings, {}
    for name, busy in s.loads:
        rate, sim_busy = rate_for_load(busy, base, trace, repeats)
        busy_s = run_busy_s(base, s.policies, trace, repeats, rate)
        plan[name] = {"busy_target": busy, "rate": rate, "sim_busy": sim_busy, "run_busy_s": busy_s}
        bench.log(
            f"load {name}: mtp1 busy {busy:.3f} -> {rate:.4g} requests/s (sim {sim_busy:.3f}; "
            f"a run {busy_s:.1f} s busy, simulated)"
        )
    return plan


def serve_all(
    bench: Bench,
    base: RunSpec,
    plan: dict[str, dict[str, float]],
    repeats: tuple[list[int], list[Prompt]],
    trace: str,
    pricing: Pricing,
    timeline: Timeline,
) -> tuple[tuple[list[dict], list[dict], list[dict]], list[dict]]:
    """Every load x repeat (its seed; the served prompts) x policy (`one_run`), a triple
    (load, seed) at a time, each run priced by its own reference passes and a triple re-run if
    a run drifted within itself (`dsim.validation.drift`) and the re-run fits in the budget
    (`timeline`): (metric rows, run info, attribution parts) of the kept attempts, and every
    attempt's drift record. `base` schedules the real runs (the study's engine profiles)."""
    s, out, (seeds, served) = bench.settings, bench.out, repeats
    repeat_files = []
    for k, seed in enumerate(seeds):  # repeat k serves the served half from prompt k n on
        repeat_files.append(out / f"prompts-served-s{seed}.jsonl")
        order = repeat_order(len(served), k, s.requests)
        write_prompt_file(repeat_files[-1], [served[j] for j in order])
    kept: tuple[list[dict], list[dict], list[dict]] = ([], [], [])
    records: list[dict] = []
    reruns_left = RERUNS_TOTAL
    for name, _ in s.loads:
        rate = plan[name]["rate"]
        for seed, prompt_file in zip(seeds, repeat_files, strict=True):
            inputs = (prompt_file, trace)
            triple, drift = serve_triple(
                bench, base, pricing, (name, seed, 1), rate, inputs, timeline
            )
            attempts = [drift]
            while not drift.settled(reruns_left):
                said = f"{name} seed {seed} drifted {drift.change:+.1%}"
                rerun = {name: len(s.policies)}
                if not timeline.fits(rerun):
                    over = clock(timeline.projected_s(rerun))
                    bench.log(f"{said}: kept, a re-run would end at {over}, past the budget")
                    break
                reruns_left -= 1
                timeline.add_runs(name, len(s.policies))
                bench.log(f"{said}: re-run")
                key = (name, seed, len(attempts) + 1)
                triple, drift = serve_triple(bench, base, pricing, key, rate, inputs, timeline)
                attempts.append(drift)
            records += [a.record(kept=a is attempts[-1]) for a in attempts]
            for part, got in zip(kept, triple, strict=True):
                part += got
    return kept, records


def serve_triple(
    bench: Bench,
    base: RunSpec,
    pricing: Pricing,
    key: tuple[str, int, int],
    rate: float,
    inputs: tuple[Path, str],
    timeline: Timeline,
) -> tuple[tuple[list[dict], list[dict], list[dict]], TripleDrift]:
    """One attempt (`key`: load, seed, attempt) at a triple on `inputs` (the repeat's prompt
    file, the trace half): every policy's run (`one_run`), each priced by its own reference
    passes, and the projection after each. (Metric rows, run info, attribution parts) and its
    drift."""
    s, (load, seed, attempt) = bench.settings, key
    folder = bench.out / "runs" / load / f"s{seed}{'-rerun' * (attempt - 1)}"
    spec = replace(base, trace=arrivals_spec(rate, s.requests, s.max_new_tokens), seed=seed)
    rows, runs, parts, drifts = [], [], [], []
    for policy in s.policies:
        done, elapsed = len(timeline.runs), clock(timeline.now() - timeline.started)
        bench.log(f"[{done + 1}/{timeline.runs_total}] {load} seed {seed} {policy} ({elapsed})")
        prompts, trace = inputs
        started = timeline.now()
        info, measured, part, drift = one_run(
            bench, replace(spec, policy=policy), prompts, trace, folder, pricing
        )
        bench.log(timeline.run_done(load, timeline.now() - started))
        tags = {"load": load, "seed": seed, "policy": policy}
        rows += [{**tags, "kind": kind, **m} for kind, m in measured.items()]
        runs.append({**tags, "folder": str(folder.relative_to(bench.out)), **info})
        parts.append({**tags, **part})
        drifts.append(drift)
    triple = TripleDrift(load, seed, attempt, tuple(drifts))
    bench.log(
        f"{load} seed {seed}: largest drift within a run {triple.change:+.1%} on the wall "
        f"clock, {triple.cpu_change:+.1%} on the CPU clock"
    )
    return (rows, runs, parts), triple


def write_results(
    bench: Bench,
    meta: dict,
    plan: dict,
    measured: tuple[list[dict], list[dict], list[dict]],
    machine_drift: dict,
    projection: list[dict],
) -> dict:
    """validation.json, comparison.json, diagnostics.json (with the `projection` history) and
    report.md; the report is also logged."""
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
        {
            "meta": meta,
            "projection": projection,
            "runs": runs,
            "attribution": attr.to_dict(orient="records"),
        },
    )
    text = report_markdown(meta, plan, runs, results, comp, attr, machine_drift)
    write_with(out / "report.md", lambda tmp: tmp.write_text(text + "\n"))
    bench.log(text)
    return results
