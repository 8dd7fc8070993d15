"""The calibration bursts: short bursts of trace-half prompts served for real before the
measured runs, to calibrate the profiles to the engine (`dsim.validation.step_check`), and
again after them, to measure how far the machine drifted."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from dsim.fileio import write_json
from dsim.models.data import Prompt, write_prompt_file
from dsim.real.runner import run_real, write_real_run
from dsim.run_spec import RunSpec
from dsim.validation.bench import Bench
from dsim.validation.plan import arrivals_spec
from dsim.validation.step_check import EngineCalibration, TimedBackend

CALIBRATION_BURSTS = (2, 8)  # requests per burst (arriving together), each policy
BURST_RATE = 1e3  # requests/s: a burst
ENGINE_PROFILE, ENGINE_DRAFT_PROFILE = "profile-engine.csv", "drafter-profile-engine.csv"
DRIFT_TOL = 0.10  # a machine whose passes sped up or slowed down more than this mid-run


def calibrate_engine(bench: Bench, spec: RunSpec, prompts: list[Prompt]) -> EngineCalibration:
    """Measure the engine on bursts (`burst_calibration`) and write the engine-calibrated
    profiles the simulations and the rate rule use."""
    bench.log(f"calibrating the engine: bursts of {CALIBRATION_BURSTS} requests per policy")
    cal = burst_calibration(bench, spec, prompts, "calibration")
    cal.apply(Path(spec.profile), bench.out / ENGINE_PROFILE, overhead=True)
    cal.apply(Path(spec.draft_cost), bench.out / ENGINE_DRAFT_PROFILE, overhead=False)
    return cal


def burst_calibration(
    bench: Bench, spec: RunSpec, prompts: list[Prompt], folder: str
) -> EngineCalibration:
    """Serve bursts of CALIBRATION_BURSTS trace-half prompts (never the measured runs'
    prompts) per policy for real and measure the pass factor and the engine overhead against
    the raw profiles of `spec`; runs and engine.json go to OUT/folder."""
    s, out = bench.settings, bench.out
    burst = out / "prompts-calibration.jsonl"
    write_prompt_file(burst, prompts[: max(CALIBRATION_BURSTS)])
    runs = []
    for n in CALIBRATION_BURSTS:
        for policy in s.policies:
            run = run_real(
                replace(spec, trace=arrivals_spec(BURST_RATE, n, s.max_new_tokens), policy=policy),
                bench.target, bench.drafter, burst, "wall", s.max_new_tokens,
                make_backend=TimedBackend,
            )  # fmt: skip
            write_real_run(run, out / folder / f"{policy.replace(':', '')}-{n}-real")
            runs.append(run)
    cal = EngineCalibration.measure(runs, Path(spec.profile), Path(spec.draft_cost))
    write_json(out / folder / "engine.json", asdict(cal))
    return cal


def describe(cal: EngineCalibration) -> str:
    """The calibration in one line of the report's header."""
    return (
        f"pass factor k {cal.pass_factor:.4f}, overhead per step "
        f"{1e3 * cal.per_step_s:.2f} ms + {1e3 * cal.per_seq_s:.3f} ms x R + "
        f"{1e3 * cal.per_token_s:.4f} ms x V ({sum(r['steps'] for r in cal.runs)} steps of "
        f"bursts of {' and '.join(map(str, CALIBRATION_BURSTS))} requests per policy, "
        f"trace-half prompts); simulated with {ENGINE_PROFILE} and {ENGINE_DRAFT_PROFILE}"
    )


def drift(start: EngineCalibration, end: EngineCalibration) -> dict[str, float]:
    """How far the model passes moved between the bursts before and after the runs."""
    return {
        "pass_factor_start": start.pass_factor,
        "pass_factor_end": end.pass_factor,
        "change": end.pass_factor / start.pass_factor - 1,
        "tolerance": DRIFT_TOL,
    }
