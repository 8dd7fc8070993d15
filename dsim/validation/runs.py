"""One measured run: real mode with the wall clock, priced by the speed trace of the reference
passes timed inside it, then its trace- and preset-driven simulations on the workload it
actually served."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.acceptance.sources import parse_acceptance
from dsim.engine.backend import Simulated
from dsim.fileio import write_with
from dsim.metrics import per_user
from dsim.real.runner import RealRun, run_real, write_real_run
from dsim.run import RunResult, run_engine, write_run
from dsim.run_inputs import resolve_engine
from dsim.run_spec import RunSpec
from dsim.validation.bench import Bench
from dsim.validation.drift import RunDrift
from dsim.validation.figures import METRICS
from dsim.validation.reference import Samples, SpeedTrace, run_factor
from dsim.validation.step_check import (
    EngineCalibration,
    priced_steps,
    step_model_check,
)
from dsim.workload import Workload


def utc() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def realized(requests: pd.DataFrame) -> Workload:
    """A real run's workload from its per-request records, with the lengths it actually
    generated (caps become exact)."""
    return Workload(
        requests["arrival_s"].to_numpy(np.float64),
        requests["prompt_tokens"].to_numpy(np.int64),
        requests["output_tokens"].to_numpy(np.int64),
        "real run",
    )


def run_name(policy: str) -> str:
    """A policy's runs' file stem in a run folder (`fixed:4` -> `fixed4`)."""
    return policy.replace(":", "")


@dataclass(frozen=True)
class KeptRun:
    """What a run's simulations ran on, read back from the folder `one_run` wrote: the trace
    simulation's spec, the real run's realized workload and its speed trace."""

    spec: RunSpec
    work: Workload
    speed: SpeedTrace

    @classmethod
    def read(cls, folder: Path, policy: str) -> KeptRun:
        name = run_name(policy)
        summary = json.loads((folder / f"{name}-trace" / "summary.json").read_text())
        requests = pd.read_parquet(folder / f"{name}-real" / "requests.parquet")
        speed = SpeedTrace.from_rows(pd.read_csv(folder / f"{name}-reference.csv"))
        return cls(RunSpec(**summary["spec"]), realized(requests), speed)


def run_metrics(result: RunResult) -> dict[str, float]:
    """The compared metrics of one run (TPOT p90 from its per-request TPOTs)."""
    tpot = per_user(result.requests)["tpot_s"].dropna().to_numpy()
    out = {m: float(result.summary[m]) for m in METRICS if m in result.summary}
    out["tpot_p90_s"] = float(np.percentile(tpot, 90)) if len(tpot) else float("nan")
    out["busy_fraction"] = float(result.summary["busy_fraction"])
    return out


@dataclass(frozen=True)
class Pricing:
    """What every run of a study is priced from: the calibration and the reference passes
    timed during it (`dsim.validation.reference`)."""

    cal: EngineCalibration
    reference: Samples

    def for_run(self, samples: Samples, file: Path) -> SpeedTrace:
        """The run's speed trace against the calibration's reference, written to `file`."""
        trace = samples.trace(self.reference)
        frame = pd.DataFrame(
            trace.rows() | {"reference_wall_s": samples.wall, "reference_cpu_s": samples.cpu}
        )
        file.parent.mkdir(parents=True, exist_ok=True)
        write_with(file, lambda tmp: frame.to_csv(tmp, index=False))
        return trace

    def median_factor(self, samples: Samples) -> float:
        """k moved by the run's median reference pass (the report's summary of its pricing)."""
        return run_factor(self.cal.pass_factor, samples, self.reference)


def one_run(
    bench: Bench,
    spec: RunSpec,
    prompts: Path,
    trace: str,
    folder: Path,
    pricing: Pricing,
) -> tuple[dict, dict[str, dict[str, float]], dict[str, float], RunDrift]:
    """One real run (scheduled with the study's engine profiles, `spec`), priced by the speed
    trace of the reference passes timed inside it, and its two simulations on the same
    profiles, each step scaled by that trace: run info, metrics per kind, attribution parts
    and its drift."""
    s = bench.settings
    name = run_name(spec.policy)
    bench.reference.take()  # only this run's passes price it
    load_before, start_utc, t0 = os.getloadavg(), utc(), time.perf_counter()
    run = run_real(
        spec, bench.target, bench.drafter, prompts, bench.clock, s.max_new_tokens,
        make_backend=bench.backend,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    samples = bench.reference.take()
    speed = pricing.for_run(samples, folder / f"{name}-reference.csv")
    priced = priced_steps(run, Path(spec.profile), Path(spec.draft_cost), speed)
    write_real_run(run, folder / f"{name}-real", priced)
    measured = {"real": run_metrics(run.result)}
    work = realized(run.result.requests)
    for kind, source in (("trace", trace), ("preset", s.preset)):
        calibration = "raw" if kind == "trace" else None  # real mode uses raw confidences
        sim_spec = replace(spec, acceptance=source, calibration=calibration)
        sims, draws = simulate_draws(sim_spec, work, speed, s.draws)
        write_run(sims[0], sim_spec, folder / f"{name}-{kind}")
        file = folder / f"{name}-{kind}-draws.csv"
        write_with(file, lambda tmp, d=draws: d.to_csv(tmp, index=False))
        means = draws.drop(columns=["draw", "seed"]).mean()
        measured[kind] = {metric: float(v) for metric, v in means.items()}
    check = step_model_check(priced)
    drift = RunDrift(spec.policy, pricing.median_factor(samples), samples.record())
    info = {
        "start_utc": start_utc,
        "wall_s": wall,
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "real_busy": measured["real"]["busy_fraction"],
        "passes_wall_s": run.backend.model_s,
        "passes_cpu_s": run.backend.model_cpu_s,
        "step_model": check,
        "pass_factor": drift.pass_factor,
        "reference": drift.reference,
    }
    return info, measured, _parts(run, measured, check, pricing.cal, speed), drift


def draw_seed(seed: int, draw: int) -> int:
    """The seed of a run's simulation `draw`: the run's own seed first (so draw 0 is the single
    simulation earlier studies made), then seeds of their own drawn from (seed, draw)."""
    if draw == 0:
        return seed
    return int(np.random.SeedSequence((seed, draw)).generate_state(1)[0])


def simulate_draws(
    spec: RunSpec, work: Workload, speed: SpeedTrace, draws: int
) -> tuple[list[RunResult], pd.DataFrame]:
    """The run's simulation under `draws` acceptance draws (the workload, profiles and speed
    trace fixed; only the seed changes, which decides the trace sequence each request walks and
    the wrap-arounds): every draw's result, and its metrics, one row each. The
    study compares a real run with the draws' mean, the simulator's expectation: a single draw
    carries noise of its own that the real run does not share (on a 2-core EPYC, an sd over
    draws of 4-5% of a fixed:4 run's TPOT p50: the validation README), and with the repeats'
    seeds fixed it was the same draw in every study."""
    backend = Simulated(parse_acceptance(spec.acceptance, spec.gamma, spec.calibration))
    seeds = [draw_seed(spec.seed, d) for d in range(draws)]
    sims = [
        run_engine(resolve_engine(replace(spec, seed=seed)), work, backend, clock=speed.clock)
        for seed in seeds
    ]
    rows = [
        {"draw": d, "seed": seed, **run_metrics(sim)}
        for d, (seed, sim) in enumerate(zip(seeds, sims, strict=True))
    ]
    return sims, pd.DataFrame(rows)


def _parts(
    run: RealRun,
    measured: dict[str, dict[str, float]],
    check: dict,
    cal: EngineCalibration,
    speed: SpeedTrace,
) -> dict[str, float]:
    """What the error attribution (`figures.attribution`) reads of one real run (the overhead
    charged scaled by the trace, as the simulations scale it)."""
    steps = run.result.steps
    overhead = cal.step_overheads(steps)
    return {
        "tpot_real": measured["real"]["tpot_p50_s"],
        "tpot_sim": measured["trace"]["tpot_p50_s"],
        "step_real_s": check["all_real_s"],
        "step_predicted_s": check["all_predicted_s"],
        "model_s": run.backend.model_s,
        "overhead_charged_s": float((overhead * speed(steps.start_s)).sum()),
        "steps": check["all_steps"],
        "tau_real": measured["real"]["accepted_length_mean"],
        "tau_sim": measured["trace"]["accepted_length_mean"],
    }
