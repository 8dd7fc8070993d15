"""The calibration bursts: short bursts of trace-half prompts served for real before the
measured runs, to calibrate the profiles to the engine (`dsim.validation.step_check`); the
reference passes timed during them are what every run's own are compared with
(`dsim.validation.reference`)."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from dsim.fileio import write_json
from dsim.models.data import Prompt, write_prompt_file
from dsim.real.runner import RealRun, run_real, write_real_run
from dsim.run_spec import RunSpec
from dsim.validation.bench import Bench
from dsim.validation.plan import arrivals_spec
from dsim.validation.step_check import EngineCalibration

CALIBRATION_BURSTS = (2, 8)  # requests per burst (arriving together), each policy
BURST_RATE = 1e3  # requests/s: a burst
BURST_PROMPTS = "prompts-calibration.jsonl"
WARM_UP_TOKENS = 8  # tokens of the untimed request per policy (`warm_up`)
ENGINE_PROFILE, ENGINE_DRAFT_PROFILE = "profile-engine.csv", "drafter-profile-engine.csv"


def calibrate_engine(bench: Bench, spec: RunSpec, prompts: list[Prompt]) -> EngineCalibration:
    """Measure the engine on bursts (`burst_calibration`) and write the engine-calibrated
    profiles the rate rule uses."""
    bench.log(f"calibrating the engine: bursts of {CALIBRATION_BURSTS} requests per policy")
    write_prompt_file(bench.out / BURST_PROMPTS, prompts[: max(CALIBRATION_BURSTS)])
    warm_up(bench, spec)
    bench.reference.take()  # the warm-up's reference passes price nothing
    cal = burst_calibration(bench, spec, "calibration")
    write_engine_profiles(cal, spec, bench.out)
    return cal


def warm_up(bench: Bench, spec: RunSpec) -> None:
    """One untimed request per policy, thrown away, before anything is measured: the first
    round of a policy in a process compiles its kernels (numba, cached on disk after the
    first run on a machine), which would otherwise land in the calibration's overhead (on a
    cold cache, about 1.7 s in one burst: ten times the engine's own time a step)."""
    for policy in bench.settings.policies:
        serve_burst(bench, replace(spec, policy=policy), 1, WARM_UP_TOKENS)


def write_engine_profiles(cal: EngineCalibration, spec: RunSpec, folder: Path) -> RunSpec:
    """`cal` applied to the raw profiles of `spec`, written to `folder`: the spec that
    simulates with them."""
    target, draft = folder / ENGINE_PROFILE, folder / ENGINE_DRAFT_PROFILE
    cal.apply(Path(spec.profile), target, overhead=True)
    cal.apply(Path(spec.draft_cost), draft, overhead=False)
    return replace(spec, profile=str(target), draft_cost=str(draft))


def serve_burst(bench: Bench, spec: RunSpec, n: int, tokens: int) -> RealRun:
    """The first n calibration prompts, arriving together, served for real under `spec`'s
    policy, at most `tokens` each."""
    return run_real(
        replace(spec, trace=arrivals_spec(BURST_RATE, n, tokens)),
        bench.target, bench.drafter, bench.out / BURST_PROMPTS, bench.clock, tokens,
        make_backend=bench.backend,
    )  # fmt: skip


def serve_bursts(bench: Bench, spec: RunSpec, n: int, folder: Path) -> list[RealRun]:
    """A burst of n (`serve_burst`) per policy; each run written to folder/POLICY-n-real."""
    runs = []
    for policy in bench.settings.policies:
        run = serve_burst(bench, replace(spec, policy=policy), n, bench.settings.max_new_tokens)
        write_real_run(run, folder / f"{policy.replace(':', '')}-{n}-real")
        runs.append(run)
    return runs


def burst_calibration(bench: Bench, spec: RunSpec, folder: str) -> EngineCalibration:
    """Serve bursts of CALIBRATION_BURSTS trace-half prompts (never the measured runs'
    prompts) per policy for real and measure the pass factor and the engine overhead against
    the raw profiles of `spec`; runs and engine.json go to OUT/folder."""
    where = bench.out / folder
    runs = [run for n in CALIBRATION_BURSTS for run in serve_bursts(bench, spec, n, where)]
    cal = EngineCalibration.measure(runs, Path(spec.profile), Path(spec.draft_cost))
    write_json(where / "engine.json", asdict(cal))
    return cal


def describe(cal: EngineCalibration) -> str:
    """The calibration in one line of the report's header."""
    return (
        f"pass factor k {cal.pass_factor:.4f}, overhead per step "
        f"{1e3 * cal.per_step_s:.2f} ms + {1e3 * cal.per_seq_s:.3f} ms x R + "
        f"{1e3 * cal.per_token_s:.4f} ms x V ({sum(r['steps'] for r in cal.runs)} steps of "
        f"bursts of {' and '.join(map(str, CALIBRATION_BURSTS))} requests per policy, "
        f"trace-half prompts); each run simulated on these profiles, every step scaled by the "
        f"run's speed trace (runs/LOAD/sSEED/POLICY-reference.csv)"
    )
