"""`dsim validate`: the simulator's predictions against real-model runs (issues 7 and 17).

The held-out prompts are split by row (`dsim.real.validation_plan`): the acceptance trace's
rows on the even rows drive the simulations, real mode serves the odd rows. The target is
profiled on this machine right before the real runs (unless a profile is given), and so is
the drafter; then bursts of requests per policy on the trace half's prompts calibrate the
profiles to the engine (`dsim.real.step_check`: a factor on the passes and an overhead per
step that grows with its sequences and verify tokens, which the simulations and the rate rule
then use), and the same bursts re-served after the last run measure the machine's drift.
Each load (a target busy fraction under `mtp1`; its rate from the simulator by the stated
rule) is repeated with different seeds (arrivals and sampling) and different served prompts
(repeat k starts k x requests prompts further into the served half), and each repeat serves
the same workload three ways per policy:
1. real mode with the wall clock (the truth);
2. simulation with the engine-calibrated profiles and the trace half (the "trace" model);
3. simulation with the same profiles and a parametric acceptance preset.
Both simulations get the real run's exact arrivals, prompt lengths and generated lengths.
`dsim.real.validation_report` turns the runs into means and spread, errors, rankings, ratios,
targets and the error attribution (validation.json, comparison.json, diagnostics.json,
report.md).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dsim import spec_grammar
from dsim.acceptance.sources import parse_acceptance
from dsim.engine.backend import Simulated
from dsim.errors import InputError
from dsim.fileio import write_json, write_with
from dsim.hardware.latency import profile_metadata, write_profile
from dsim.hardware.measure import Grid
from dsim.metrics import per_user
from dsim.models.cpu_profile import write_cpu_profile
from dsim.models.data import Prompt, read_prompt_file, write_prompt_file
from dsim.models.target import SMOLLM2
from dsim.policies import Oracle, parse_policy
from dsim.real.defaults import DEFAULT_DRAFTER, DEFAULT_PROMPTS, DEFAULT_REPEATS, DEFAULT_TRACE
from dsim.real.runner import RealRun, run_real, write_real_run
from dsim.real.step_check import (
    EngineCalibration,
    TimedBackend,
    priced_steps,
    run_totals,
    step_model_check,
)
from dsim.real.validation_plan import (
    arrivals_spec,
    generated_lengths,
    rate_for_load,
    repeat_order,
    served_prompts,
    trace_half,
    trace_prompts,
    write_trace_half,
)
from dsim.real.validation_report import (
    METRICS,
    attribution,
    comparisons,
    report_markdown,
    validation_json,
)
from dsim.run import RunResult, run_engine, write_run
from dsim.run_inputs import resolve_engine
from dsim.run_spec import RunSpec
from dsim.workload import Workload

POLICIES = ("mtp1", "fixed:4", "dspark")
LOADS = (("light", 1 / 3), ("moderate", 2 / 3))  # target mtp1 busy fractions
DRAFTER_BATCHES = (1, 2, 4, 8, 16, 32)
CALIBRATION_BURSTS = (2, 8)  # requests per burst (arriving together), each policy
BURST_RATE = 1e3  # requests/s: a burst
ENGINE_PROFILE, ENGINE_DRAFT_PROFILE = "profile-engine.csv", "drafter-profile-engine.csv"
DENSE_SEQS = 4  # the on-machine profile measures every (R, q) cell up to this R
PROFILE_WARMUP = 1  # untimed passes per point: the timed rounds run them all again (v15: 2 -> 1)
DRIFT_TOL = 0.10  # a machine whose passes sped up or slowed down more than this mid-run


@dataclass(frozen=True)
class Settings:
    drafter: Path = DEFAULT_DRAFTER
    acceptance: Path = DEFAULT_TRACE  # the drafter's trace, recorded on `prompts`
    prompts: Path = DEFAULT_PROMPTS
    profile: Path | None = None  # None: profile the target on this machine before the real runs
    preset: str = "preset:dspark:chat"
    policies: tuple[str, ...] = POLICIES
    loads: tuple[tuple[str, float], ...] = LOADS
    repeats: int = DEFAULT_REPEATS  # seeds seed, seed + 1, ...
    requests: int = 10  # per run
    max_new_tokens: int = 64
    max_seqs: int = 16
    seed: int = 0
    target: str = SMOLLM2
    profile_contexts: tuple[int, ...] | None = None  # None: profile_grid's rule

    def check(self) -> None:
        """Everything that can be refused before a model is loaded or a file written."""
        for name in ("repeats", "requests", "max_new_tokens", "max_seqs"):
            if getattr(self, name) < 1:
                raise InputError(None, None, f"--{name.replace('_', '-')} must be >= 1")
        if self.seed < 0:
            raise InputError(None, None, "--seed must be >= 0")
        if not self.policies:
            raise InputError(None, None, "--policies names no policy")
        for policy in self.policies:
            if isinstance(parse_policy(policy), Oracle):
                raise InputError(None, None, "policy oracle cannot be served for real")
        names = [n for n, _ in self.loads]
        if not names or len(set(names)) != len(names):
            raise InputError(None, None, "--loads needs distinct names: NAME=BUSY,...")
        for name, busy in self.loads:
            if not 0 < busy < 1:
                raise InputError(None, None, f"load {name}: busy fraction must be in (0, 1)")
        for path, what in ((self.drafter, "drafter checkpoint"), (self.profile, "profile")):
            if path is not None and not Path(path).is_file():
                raise InputError(path, None, f"{what} not found")

    def profile_grid(self, longest: int, block: int) -> Grid:
        """The on-machine profile's grid: R up to --max-seqs at q = 1, 2, 4, 8 tokens each,
        and every cell R <= DENSE_SEQS, q <= `block` (gamma + 1, the longest verify block), and
        one sequence of B tokens for every B <= 2 x `block` no such cell has (11 and 13 at
        gamma 7), at contexts 128, 256, 512, or 128, 512 and `longest` (the longest served
        prompt plus the output cap, rounded up to 128) when that is longer: the step model then
        interpolates over every context the runs reach instead of extrapolating past 512.
        Every cell the runs live in (R ~ 1-3) is measured, not interpolated, because the CPU
        pass is not monotone in B there (probe_r2.py, probe_r3.txt: 2 x 5, 2 x 6 and 3 x 5
        tokens cost more than 2 x 8 and 3 x 6; v13: B = 9-15 is a slow band, and B = 13,
        measured by no cell, cost 9-11% more than the model said, probe_ragged.txt), which no
        interpolation between measured B can see. Above 2 x `block` the measured B are at most
        4 apart and the pass is smooth."""
        seqs = tuple(sorted({r for r in (1, 2, 4, 16, 64) if r < self.max_seqs} | {self.max_seqs}))
        top = -(-longest // 128) * 128
        contexts = self.profile_contexts or ((128, 256, 512) if top <= 512 else (128, 512, top))
        dense = range(1, min(DENSE_SEQS, self.max_seqs) + 1)
        cells = tuple((r, q) for r in dense for q in range(1, block + 1))
        covered = {r * q for r, q in cells}
        cells += tuple((1, b) for b in range(1, 2 * block + 1) if b not in covered)
        return Grid(seqs, (1, 2, 4, 8), contexts, (1, 4), (32, 128), cells)


def parse_loads(text: str) -> tuple[tuple[str, float], ...]:
    """`light=0.333,moderate=0.667` -> ((name, busy fraction), ...)."""
    loads = spec_grammar.key_values(text, "--loads", "NAME=BUSY")
    for name, busy in loads.items():
        if not name:
            raise InputError(None, None, f"--loads: entry {busy!r} needs a NAME=")
        spec_grammar.number(busy, f"--loads entry {name!r}: BUSY", gt=0, lt=1)
    return tuple((name, float(busy)) for name, busy in loads.items())


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


def run_metrics(result: RunResult) -> dict[str, float]:
    """The compared metrics of one run (TPOT p90 from its per-request TPOTs)."""
    tpot = per_user(result.requests)["tpot_s"].dropna().to_numpy()
    out = {m: float(result.summary[m]) for m in METRICS if m in result.summary}
    out["tpot_p90_s"] = float(np.percentile(tpot, 90)) if len(tpot) else float("nan")
    out["busy_fraction"] = float(result.summary["busy_fraction"])
    return out


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


def _utc() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def validate(s: Settings, out: Path, log: Callable[[str], None] = print) -> dict:
    """Every load x repeat x policy: a real run and its trace and preset simulations; writes
    the runs, the profiles, validation.json, comparison.json, diagnostics.json and report.md.
    Input errors are raised before anything is written."""
    import torch

    from dsim.real.runner import load_models, profile_threads

    s.check()
    prompts = read_prompt_file(s.prompts)
    served = served_prompts(prompts)
    half, trace_meta = trace_half(s.acceptance, s.prompts, len(prompts))
    # The given profile's thread count, or 1 (real mode's) for the profile measured here.
    threads = profile_threads(profile_metadata(s.profile)) if s.profile is not None else 1
    if threads:
        torch.set_num_threads(threads)
    target, drafter = load_models(s.target, s.drafter)
    if int(half["gamma"].iloc[0]) != drafter.gamma:
        raise InputError(s.acceptance, None, f"gamma differs from the drafter's {drafter.gamma}")
    started = time.perf_counter()
    meta = {
        "command": "dsim validate",
        "date_utc": _utc(),
        **machine(),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_start": " / ".join(f"{x:.2f}" for x in os.getloadavg()),
        "drafter": str(s.drafter),
        "acceptance_trace": f"{s.acceptance} (rows on the even rows of {s.prompts})",
        "served_prompts": f"odd rows of {s.prompts} ({len(served)} prompts; repeat k from "
        f"prompt k x {s.requests} on)",
        "requests_per_run": s.requests,
        "max_new_tokens": s.max_new_tokens,
        "max_seqs": s.max_seqs,
        "repeats": s.repeats,
        "seeds": f"{s.seed}..{s.seed + s.repeats - 1} (arrivals and sampling)",
    }
    served_file, trace_file = out / "prompts-served.jsonl", out / "trace-half.parquet"
    write_prompt_file(served_file, served)
    write_trace_half(half, trace_meta, s.acceptance, trace_file)
    draft_profile = out / "drafter-profile.csv"
    log(f"profiling the drafter on this machine ({draft_profile})")
    measure_drafter_profile(drafter, target, draft_profile)
    prompt_lengths = np.array([len(target.encode_chat(p.prompt)) for p in served], np.int64)
    profile = s.profile
    if profile is None:  # never clock a validation by another machine's profile
        profile = out / "profile.csv"
        log(f"profiling {s.target} on this machine ({profile})")
        grid = s.profile_grid(int(prompt_lengths.max()) + s.max_new_tokens, drafter.gamma + 1)
        write_cpu_profile(target, s.target, grid, profile, warmup=PROFILE_WARMUP, progress=False)
    meta["profile"] = str(profile)
    raw = RunSpec(
        trace=arrivals_spec(1.0, s.requests, s.max_new_tokens),
        profile=str(profile),
        gamma=drafter.gamma,
        seed=s.seed,
        max_seqs=s.max_seqs,
        draft_cost=str(draft_profile),
        drafter_kind="block",  # the real drafter's draft() is one call per round, any policy
        fused_prefill=False,  # the simulations model real mode's engine (`run_real`)
    )
    log(f"calibrating the engine: bursts of {CALIBRATION_BURSTS} requests per policy")
    burst_prompts = trace_prompts(prompts)
    cal = calibrate_engine(raw, target, drafter, burst_prompts, s, out)
    meta["engine_calibration"] = (
        f"pass factor k {cal.pass_factor:.4f}, overhead per step "
        f"{1e3 * cal.per_step_s:.2f} ms + {1e3 * cal.per_seq_s:.3f} ms x R + "
        f"{1e3 * cal.per_token_s:.4f} ms x V ({sum(r['steps'] for r in cal.runs)} steps of "
        f"bursts of {' and '.join(map(str, CALIBRATION_BURSTS))} requests per policy, "
        f"trace-half prompts); simulated with {ENGINE_PROFILE} and {ENGINE_DRAFT_PROFILE}"
    )
    profile, draft_profile = out / ENGINE_PROFILE, out / ENGINE_DRAFT_PROFILE
    base = replace(raw, profile=str(profile), draft_cost=str(draft_profile))
    seeds = [s.seed + k for k in range(s.repeats)]
    expected_out = generated_lengths(half, s.max_new_tokens)
    plan = {}
    for name, busy in s.loads:
        rate, sim_busy = rate_for_load(
            busy, base, str(trace_file), seeds, s.requests, prompt_lengths, expected_out
        )
        plan[name] = {"busy_target": busy, "rate": rate, "sim_busy": sim_busy}
        log(f"load {name}: mtp1 busy {busy:.3f} -> {rate:.4g} requests/s (sim {sim_busy:.3f})")
    rows, runs, parts = [], [], []
    total, done = len(s.loads) * len(seeds) * len(s.policies), 0
    repeat_files = []
    for k, seed in enumerate(seeds):  # repeat k serves the served half from prompt k n on
        repeat_files.append(out / f"prompts-served-s{seed}.jsonl")
        order = repeat_order(len(served), k, s.requests)
        write_prompt_file(repeat_files[-1], [served[j] for j in order])
    runs_started = time.perf_counter()  # the ETA extrapolates the real runs, not the set-up
    for name, _ in s.loads:
        for seed, prompt_file in zip(seeds, repeat_files, strict=True):
            for policy in s.policies:
                now = time.perf_counter()
                left = (now - runs_started) / done * (total - done) if done else None
                eta = f", ~{_clock(left)} left" if left is not None else ""
                elapsed = _clock(now - started)
                log(f"[{done + 1}/{total}] {name} seed {seed} {policy} ({elapsed}{eta})")
                spec = replace(
                    base,
                    trace=arrivals_spec(plan[name]["rate"], s.requests, s.max_new_tokens),
                    policy=policy,
                    seed=seed,
                )
                folder = out / "runs" / name / f"s{seed}"
                info, measured, part = _one_run(
                    spec, target, drafter, prompt_file, s, str(trace_file), folder, cal
                )
                key = {"load": name, "seed": seed, "policy": policy}
                rows += [{**key, "kind": kind, **m} for kind, m in measured.items()]
                runs.append({**key, **info})
                parts.append({**key, **part})
                done += 1
    log("re-measuring the engine on the same bursts (drift check)")
    end = burst_calibration(raw, target, drafter, burst_prompts, s, out, "calibration-end")
    drift = {
        "pass_factor_start": cal.pass_factor,
        "pass_factor_end": end.pass_factor,
        "change": end.pass_factor / cal.pass_factor - 1,
        "tolerance": DRIFT_TOL,
    }
    frame = pd.DataFrame(rows)
    results = validation_json(frame)
    comp = comparisons(frame)
    attr = attribution(pd.DataFrame(parts))
    meta["wall_time"] = _clock(time.perf_counter() - started)
    write_json(out / "validation.json", results)
    write_json(out / "comparison.json", {"loads": plan, "by_load": comp, "machine_drift": drift})
    write_json(
        out / "diagnostics.json",
        {"meta": meta, "runs": runs, "attribution": attr.to_dict(orient="records")},
    )
    text = report_markdown(meta, plan, runs, results, comp, attr, drift)
    write_with(out / "report.md", lambda tmp: tmp.write_text(text + "\n"))
    log(text)
    return results


def calibrate_engine(
    spec: RunSpec, target, drafter, prompts: list[Prompt], s: Settings, out: Path
) -> EngineCalibration:
    """Measure the engine on bursts (`burst_calibration`) and write the engine-calibrated
    profiles the simulations and the rate rule use."""
    cal = burst_calibration(spec, target, drafter, prompts, s, out, "calibration")
    cal.apply(Path(spec.profile), out / ENGINE_PROFILE, overhead=True)
    cal.apply(Path(spec.draft_cost), out / ENGINE_DRAFT_PROFILE, overhead=False)
    return cal


def burst_calibration(
    spec: RunSpec, target, drafter, prompts: list[Prompt], s: Settings, out: Path, folder: str
) -> EngineCalibration:
    """Serve bursts of CALIBRATION_BURSTS trace-half prompts (never the measured runs'
    prompts) per policy for real and measure the pass factor and the engine overhead against
    the raw profiles of `spec` (`dsim.real.step_check`); runs and engine.json go to
    OUT/folder."""
    burst = out / "prompts-calibration.jsonl"
    write_prompt_file(burst, prompts[: max(CALIBRATION_BURSTS)])
    runs = []
    for n in CALIBRATION_BURSTS:
        for policy in s.policies:
            run = run_real(
                replace(spec, trace=arrivals_spec(BURST_RATE, n, s.max_new_tokens), policy=policy),
                target, drafter, burst, "wall", s.max_new_tokens, make_backend=TimedBackend,
            )  # fmt: skip
            write_real_run(run, out / folder / f"{policy.replace(':', '')}-{n}-real")
            runs.append(run)
    cal = EngineCalibration.measure(runs, Path(spec.profile), Path(spec.draft_cost))
    write_json(out / folder / "engine.json", asdict(cal))
    return cal


def _one_run(
    spec: RunSpec,
    target,
    drafter,
    prompts: Path,
    s: Settings,
    trace: str,
    folder: Path,
    cal: EngineCalibration,
) -> tuple[dict, dict[str, dict[str, float]], dict[str, float]]:
    """One real run and its two simulations (with the engine-calibrated profiles of `spec`):
    run info, metrics per kind, attribution parts."""
    name = spec.policy.replace(":", "")
    load_before, start_utc, t0 = os.getloadavg(), _utc(), time.perf_counter()
    run = run_real(
        spec, target, drafter, prompts, "wall", s.max_new_tokens, make_backend=TimedBackend
    )
    wall = time.perf_counter() - t0
    priced = priced_steps(run, Path(spec.profile), Path(spec.draft_cost))
    write_real_run(run, folder / f"{name}-real", priced)
    measured = {"real": run_metrics(run.result)}
    work = realized(run)
    for kind, source in (("trace", trace), ("preset", s.preset)):
        calibration = "raw" if kind == "trace" else None  # real mode uses raw confidences
        sim_spec = replace(spec, acceptance=source, calibration=calibration)
        backend = Simulated(parse_acceptance(source, spec.gamma, calibration))
        sim = run_engine(resolve_engine(sim_spec), work, backend)
        write_run(sim, sim_spec, folder / f"{name}-{kind}")
        measured[kind] = run_metrics(sim)
    check = step_model_check(priced)
    totals = run_totals(run, check["all_predicted_s"])
    info = {
        "start_utc": start_utc,
        "wall_s": wall,
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "real_busy": measured["real"]["busy_fraction"],
        "step_model": check,
    }
    part = {
        "tpot_real": measured["real"]["tpot_p50_s"],
        "tpot_sim": measured["trace"]["tpot_p50_s"],
        "step_real_s": check["all_real_s"],
        "step_predicted_s": check["all_predicted_s"],
        "model_s": run.backend.model_s,
        "overhead_charged_s": cal.overhead_s(
            totals["seqs"], totals["verify_tokens"], totals["steps"]
        ),
        "steps": check["all_steps"],
        "tau_real": measured["real"]["accepted_length_mean"],
        "tau_sim": measured["trace"]["accepted_length_mean"],
    }
    return info, measured, part
