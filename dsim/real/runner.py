"""`dsim serve`: the simulator's engine and policies driving real forward passes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from dsim.acceptance.calibration import parse_temperatures, read_calibration
from dsim.acceptance.replay import RAW
from dsim.engine.clock import CLOCKS, ClockMaker
from dsim.errors import InputError
from dsim.models.data import read_prompt_file
from dsim.policies import Oracle
from dsim.real.backend import RealBackend
from dsim.real.workload import real_workload
from dsim.run import REAL_FILES, RunResult, run_engine, write_run
from dsim.run_inputs import EngineInputs, load_spec_workload, resolve_engine
from dsim.run_spec import RunSpec


@dataclass
class RealRun:
    result: RunResult
    spec: RunSpec  # with the drafter's gamma
    engine: EngineInputs  # the spec, read
    texts: list[dict]  # per request: request_id, prompt_id, domain, output_tokens, text
    backend: RealBackend
    outputs: list[list[int]]  # per request: the token ids the engine recorded


def load_models(target: str, drafter: str | Path | None):
    """The target (`dsim.models.target.load_target` spelling) and, if given, its drafter."""
    from dsim.models.checkpoint import load_drafter
    from dsim.models.target import load_target

    model = load_target(target)
    draft_model = None if drafter is None else load_drafter(drafter, model)
    return model, draft_model


def profile_threads(sidecar: dict) -> int | None:
    """The torch thread count a profile was measured with (its sidecar), if it says."""
    threads = sidecar.get("threads")
    return int(threads) if threads else None


def check_options(spec: RunSpec, clock: str | ClockMaker, has_drafter: bool) -> EngineInputs:
    """Read the engine's inputs and reject what real mode cannot do, before any model is
    loaded."""
    if isinstance(clock, str) and clock not in CLOCKS:
        raise InputError(None, None, f"--clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    engine = resolve_engine(spec)
    if isinstance(engine.policy.first, Oracle):
        raise InputError(
            None,
            None,
            "policy oracle needs each request's accepted prefix before verifying, which only "
            "a simulation knows; it cannot be served for real",
        )
    if engine.policy.drafts and not has_drafter:
        raise InputError(None, None, f"policy {spec.policy!r} drafts: --drafter is required")
    return engine


def run_real(
    spec: RunSpec,
    target,
    drafter,
    prompts: str | Path,
    clock: str | ClockMaker = "profile",
    max_new_tokens: int = 128,
    greedy: bool = False,
    progress: Callable[[int, int], None] | None = None,
    make_backend: Callable[..., RealBackend] = RealBackend,
) -> RealRun:
    """Serve `spec`'s arrivals with real prompts, drafter and target under `spec.policy`.

    `clock` "profile" advances time by the profile's latency for each real batch
    (deterministic); "wall" by the measured time of the step's passes (or a caller's own
    clock maker, e.g. a `WallClock` on a pausable time source). `spec.calibration` (an
    STS calibration JSON) calibrates the drafter's confidences before the policy sees them.
    `make_backend` builds the backend (tests and benchmarks wrap it to observe rounds).
    """
    spec = replace(spec, fused_prefill=False)  # the backend runs each prefill as its own pass
    if drafter is not None:
        spec = replace(spec, gamma=drafter.gamma)
    engine = check_options(spec, clock, drafter is not None)
    temperatures = None
    if spec.calibration not in (None, RAW):
        where = spec.calibration
        temperatures = parse_temperatures(read_calibration(where), where, spec.gamma)
    work = real_workload(
        load_spec_workload(spec), read_prompt_file(prompts), target, max_new_tokens
    )
    backend = make_backend(
        target,
        drafter if engine.policy.drafts else None,
        work.token_ids,
        work.workload.output_tokens,
        seed=spec.seed,
        greedy=greedy,
        gamma=spec.gamma,
        temperatures=temperatures,
    )
    result = run_engine(engine, work.workload, backend, clock, progress)
    counts = result.requests["output_tokens"].tolist()
    outputs = [backend.text_tokens(i, n) for i, n in enumerate(counts)]
    texts = [
        {
            "request_id": i,
            "prompt_id": p.id,
            "domain": p.domain,
            "output_tokens": len(out),
            "text": target.decode(out),
        }
        for i, (p, out) in enumerate(zip(work.prompts, outputs, strict=True))
    ]
    return RealRun(result, spec, engine, texts, backend, outputs)


def write_real_run(run: RealRun, out: str | Path, steps: pd.DataFrame | None = None) -> None:
    """What `dsim run` writes, plus texts.jsonl (one generated text per request) and, when
    given, steps.csv (`dsim validate`: every step priced by the step-time model)."""
    texts = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in run.texts)

    def extra(folder: Path) -> None:
        texts_file, steps_file = REAL_FILES
        (folder / texts_file).write_text(texts)
        if steps is not None:
            steps.to_csv(folder / steps_file, index=False, float_format="%.6g")

    write_run(run.result, run.spec, out, extra)
