"""A CPU load profile measured through real mode's own target pass (`dsim profile --device cpu`).

Real mode runs every target step as ONE flattened pass over ragged per-request blocks with a KV
pool read in place (`dsim.models.ragged.RaggedTarget.forward`), then the LM head and softmax at
the positions it samples from (`RaggedTarget.probs`): every position of a verify block, the
last position of a prefill block. This module times exactly those two calls, on random weights
built from a zoo config (latency does not depend on weight values), at grid points where the
number of sequences R varies independently of the batch tokens B (`Grid`):

- verify rows: R sequences each holding `context_len` cached tokens, each verifying q tokens;
- prefill rows: R sequences each prefilling a chunk that ends at `context_len`;
- mixed steps (sidecar only): verify and prefill blocks in one pass, to measure the error of the
  step-time model's composition (`LatencyModel.step`).

Rejection sampling after the pass (an elementwise op over the vocabulary per verified position)
is not timed: it needs a drafter, and the profile is the target's.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch

from dsim.errors import InputError
from dsim.hardware import zoo
from dsim.hardware.latency import LatencyModel, write_profile
from dsim.hardware.measure import (
    CPU_TIMERS,
    Grid,
    StepTimer,
    build_model,
    check_run,
    cpu_timer,
    device_name,
    latency_percentiles,
    profiled_config,
)
from dsim.models.ragged import RaggedTarget

TIMER_NOTES = {
    "wall": "perf_counter: wall time",
    "cpu": "thread_time: CPU time of the measuring thread (1 torch thread), which leaves out "
    "the time other load keeps it descheduled (not cache or memory-bandwidth contention)",
}

# A part of a step: (sequences, tokens per sequence, cached tokens before the pass, prefill?).
Part = tuple[int, int, int, bool]


def random_target(model: str, drafter: bool = False) -> Any:
    """A random-weight `Target` of the zoo model or its drafter stand-in (no tokenizer: only its
    passes are timed)."""
    from dsim.models.target import Target

    config = profiled_config(model, drafter)
    net = build_model(config, torch.device("cpu"), torch.float32)
    net.requires_grad_(False)
    return Target(model, net, None, f"{model}:random")


class PassClock:
    """Times real mode's pass over given parts on one KV pool sized for the whole grid."""

    def __init__(self, target: Any, slots: int, capacity: int, seed: int = 0) -> None:
        self.passes = RaggedTarget(target)
        self.vocab = target.vocab_size
        self.gen = torch.Generator().manual_seed(seed)
        for rid in range(slots):  # lowest free slots, in order: rid == slot
            self.passes.store.open(rid, capacity)

    def step(self, parts: list[Part]) -> tuple[Callable[[], None], Callable[[], None]]:
        """`(setup, run)` for `parts` (request ids 0.. in part order): `setup` puts each
        request's cached length in place (every point shares the pool's slots), `run` is the
        pass. `forward` writes KV past each request's length without committing, so repeats
        see the same cache and need no reset."""
        rids, cached_lens, blocks, keep, at = [], [], [], [], 0
        for seqs, q, cached, prefill in parts:
            for _ in range(seqs):
                rids.append(len(rids))
                cached_lens.append(cached)
                blocks.append(torch.randint(self.vocab, (q,), generator=self.gen).tolist())
                keep.extend([at + q - 1] if prefill else range(at, at + q))
                at += q
        index = torch.tensor(keep)
        lengths = self.passes.store.lengths

        def setup() -> None:
            for rid, n in zip(rids, cached_lens, strict=True):
                lengths[rid] = n

        def run() -> None:
            states = self.passes.forward(rids, blocks)
            self.passes.probs(states[index])

        return setup, run


@dataclass(frozen=True)
class Focus:
    """Verify points of at most `max_seqs` sequences, timed again in `rounds` more rounds
    after each round over all points: where a study's steps live (a light or moderate load
    on a small model spends nearly all its decode time at one or two sequences), a cell's
    median of the profile's few repeats moves the price of most of a run (the validation
    study's README: the probe of the small-batch cells). No focus: every point alike."""

    max_seqs: int = 0
    rounds: int = 0

    def points(self, verify: Sequence[int]) -> list[int]:
        """Indices of the focused points among verify points of `verify` sequences each."""
        return [i for i, r in enumerate(verify) if r <= self.max_seqs] if self.rounds else []


@dataclass(frozen=True)
class Before:
    """An untimed pass run right before every timed verify pass, given its sequence count:
    what a run's round runs before its verify (a drafting engine's draft). A pass's time
    depends on the pass before it: on a 2-core EPYC VM a drafter pass before the target's
    moved the one-sequence cells' ratios to each other by 1.5-3%, the size of the validation's
    per-cell price errors (its README: the in-situ probes), so a profile that prices a drafting
    engine's verifies times them where the engine runs them. `note` says what it runs."""

    run: Callable[[int], None]
    note: str

    def preceding(
        self, step: tuple[Callable[[], None], Callable[[], None]], seqs: int, spent: list[float]
    ) -> tuple[Callable[[], None], Callable[[], None]]:
        """`step` with this pass (for `seqs` sequences) after its setup, its wall seconds
        appended to `spent`."""
        setup, run = step

        def setup_then_before() -> None:
            setup()
            start = time.perf_counter()
            self.run(seqs)
            spent.append(time.perf_counter() - start)

        return setup_then_before, run


def round_robin(
    steps: list[tuple[Callable[[], None], Callable[[], None]]],
    repeats: int,
    warmup: int,
    timer: StepTimer,
    on_round: Callable[[], None] = lambda: None,
    again: Sequence[int] = (),
    again_rounds: int = 0,
) -> list[np.ndarray]:
    """Seconds per point: every point's untimed warm-up, then the timed repeats in rounds, one
    repeat of every point per round. On a shared machine a slow minute then costs every point
    one repeat, instead of all the repeats of the few points timed in it: the profile's shape
    across points, which the policies compare, stays smooth (timed point by point, two
    validation profiles differed by up to 30% at single points). Each round is followed by
    `again_rounds` rounds over the points `again` only, so those points have
    repeats x (1 + again_rounds) samples, spread over the phase as the others' are: a point's
    first `repeats` samples are its rounds over all points, the rest its `again` rounds."""
    for setup, run in steps:
        for _ in range(warmup):
            setup()
            run()
    times: list[list[float]] = [[] for _ in steps]
    extra: list[list[float]] = [[] for _ in steps]
    for _ in range(repeats):
        for samples, points in [(times, range(len(steps))), *[(extra, again)] * again_rounds]:
            for j in points:
                setup, run = steps[j]
                setup()
                samples[j].append(timer(run))
        on_round()
    return [np.array(t + e) for t, e in zip(times, extra, strict=True)]


def _row(times: np.ndarray, phase: str, tokens: int, seqs: int, ctx: int) -> dict[str, Any]:
    p10, p50, p90 = latency_percentiles(times)
    return {
        "phase": phase,
        "batch_tokens": tokens,
        "num_seqs": seqs,
        "context_len": ctx,
        "latency_ms": p50,
        "latency_ms_p10": p10,
        "latency_ms_p90": p90,
    }


class Timed(NamedTuple):
    """What `measure_cpu_profile` timed: the profile's rows, the mixed steps, and the seconds
    of its work beyond the plain rounds (the focus's rounds, the `before` passes), which a
    projection of the profiling phase leaves out."""

    rows: pd.DataFrame
    mixed: list[dict[str, Any]]
    focus_s: float
    before_s: float


def measure_cpu_profile(
    target: Any,
    grid: Grid,
    repeats: int = 5,
    warmup: int = 2,
    timer: StepTimer = cpu_timer,
    on_round: Callable[[], None] = lambda: None,
    focus: Focus = Focus(),
    before: Before | None = None,
) -> Timed:
    """Verify and prefill rows of the profile, the mixed steps of `grid.mixed_points`, timed
    in rounds over all of them (`round_robin`), the `focus` points more often, each verify
    point after the `before` pass where given; and the seconds the focus's own rounds and the
    `before` passes took (what the profile's work costs beyond its plain rounds)."""
    slots = max(grid.seqs) + max(grid.prefill_seqs, default=0)
    longest = max(b // r for _, b, r in grid.points())  # the widest block, cells included
    clock = PassClock(target, slots, max(grid.contexts) + longest)
    verify = [("verify", b, r, ctx, [(r, b // r, ctx, False)]) for ctx, b, r in grid.points()]
    prefill = [
        ("prefill", p, r, ctx, [(r, p // r, ctx - p // r, True)])
        for ctx, p, r in grid.prefill_points()
    ]
    mixed_points = grid.mixed_points()
    mixed_parts = [
        [(r, q, ctx, False), (rp, chunk, ctx - chunk, True)]
        for (r, q), (rp, chunk), ctx in mixed_points
    ]
    single = verify + prefill
    steps = [clock.step(parts) for *_, parts in single] + [clock.step(p) for p in mixed_parts]
    spent: list[float] = []
    if before is not None:
        for j, (_, _, r, _, _) in enumerate(verify):
            steps[j] = before.preceding(steps[j], r, spent)
    again = focus.points([r for _, _, r, _, _ in verify])
    times = round_robin(steps, repeats, warmup, timer, on_round, again, focus.rounds)
    focus_s = float(sum(times[j][repeats:].sum() for j in again))
    rows = [
        _row(t, phase, tokens, seqs, ctx)
        for (phase, tokens, seqs, ctx, _), t in zip(single, times[: len(single)], strict=True)
    ]
    mixed = [
        {
            "verify_tokens": r * q,
            "num_seqs": r,
            "context_len": ctx,
            "prefill_tokens": rp * chunk,
            "prefill_seqs": rp,
            "prefill_context": ctx,
            "latency_ms": float(np.median(t) * 1e3),
        }
        for ((r, q), (rp, chunk), ctx), t in zip(mixed_points, times[len(rows) :], strict=True)
    ]
    return Timed(pd.DataFrame(rows), mixed, focus_s, float(sum(spent)))


def composition_check(model: LatencyModel, mixed: list[dict[str, Any]]) -> dict[str, Any]:
    """The step-time model's prediction for each measured mixed step, and its relative error
    (the composition's error plus each part's interpolation error)."""
    out = []
    for m in mixed:
        pred = model.step(
            m["verify_tokens"],
            m["num_seqs"],
            m["context_len"],
            m["prefill_tokens"],
            m["prefill_seqs"],
            m["prefill_context"],
        )
        naive = model.latency(m["verify_tokens"], m["num_seqs"], m["context_len"]) + model.prefill(
            m["prefill_tokens"], m["prefill_seqs"], m["prefill_context"]
        )
        out.append(
            {
                **m,
                "predicted_ms": round(pred * 1e3, 3),
                "error": round(pred * 1e3 / m["latency_ms"] - 1, 4),
                "sum_of_parts_error": round(naive * 1e3 / m["latency_ms"] - 1, 4),
            }
        )
    err = np.abs([o["error"] for o in out]) if out else np.array([np.nan])
    return {
        "steps": out,
        "median_abs_error": round(float(np.median(err)), 4),
        "worst_abs_error": round(float(np.max(err)), 4),
    }


def profile_cpu(
    model: str,
    grid: Grid,
    out: str | Path,
    *,
    repeats: int = 5,
    warmup: int = 2,
    threads: int | None = None,
    drafter: bool = False,
    timer: str = "wall",
    command: str = "",
    progress: bool = True,
) -> pd.DataFrame:
    """`dsim profile --device cpu`: measure `model` (or its drafter stand-in) on random weights
    through real mode's pass; write CSV + sidecar."""
    if timer not in CPU_TIMERS:
        raise InputError(None, None, f"--timer must be wall or cpu, got {timer!r}")
    if timer == "cpu" and threads != 1:
        raise InputError(None, None, "--timer cpu times one thread: give --threads 1")
    check_run(repeats, warmup, threads)
    load_before = os.getloadavg()
    target = random_target(model, drafter)
    label = f"{model} drafter stand-in" if drafter else model
    extra = {"drafter": "stand-in: one decoder layer of the target's width; not a real drafter"}
    return write_cpu_profile(
        target,
        label,
        grid,
        out,
        repeats=repeats,
        warmup=warmup,
        timer=timer,
        command=command,
        progress=progress,
        meta={
            "load_average_before": load_before,
            "weights": "random (latency does not depend on them)",
            **(extra if drafter else {}),
        },
    )


def write_cpu_profile(
    target: Any,
    label: str,
    grid: Grid,
    out: str | Path,
    *,
    repeats: int = 5,
    warmup: int = 2,
    timer: str = "wall",
    command: str = "",
    progress: bool = True,
    meta: dict[str, Any] | None = None,
    focus: Focus = Focus(),
    before: Before | None = None,
) -> pd.DataFrame:
    """Measure `target`'s passes on `grid` (the `focus` points more often, each verify point
    after the `before` pass where given) and write the profile, its sidecar (machine, load, the
    model fit's residuals, the mixed-step composition check) atomically."""
    import transformers
    from rich.progress import Progress

    if timer not in CPU_TIMERS:
        raise InputError(None, None, f"--timer must be wall or cpu, got {timer!r}")
    meta = {"load_average_before": os.getloadavg(), **(meta or {})}
    started = time.perf_counter()
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"profiling {label} (rounds over all points)", total=repeats)
        timed = measure_cpu_profile(
            target, grid, repeats, warmup, CPU_TIMERS[timer], lambda: bar.advance(task), focus,
            before,
        )  # fmt: skip
    df, mixed, before_s = timed.rows, timed.mixed, round(timed.before_s, 3)
    device = device_name(torch.device("cpu"))
    df = df.assign(device=device, model=label, dtype="float32")
    fitted = LatencyModel(df, name=Path(out).stem)
    meta = {
        "estimate": False,
        "method": "measured: real mode's target pass (dsim.models.ragged.RaggedTarget.forward "
        "over ragged blocks with a KV pool, then the LM head and softmax at every verify "
        "position and the last prefill position), rejection sampling not timed; the timed "
        "repeats in rounds over all points (round_robin), the focus points in more rounds",
        "model": label,
        "model_config": zoo.describe(target.model.config),
        "device": device,
        "device_type": "cpu",
        "dtype": "float32",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "focus": {
            **asdict(focus),
            "repeats": repeats * (1 + focus.rounds),
            "seconds": round(timed.focus_s, 3),
        },
        "before": None if before is None else {"note": before.note, "seconds": before_s},
        "warmup": warmup,
        "timer": TIMER_NOTES[timer],
        "grid": grid.describe(),
        "fit": fitted.fit_report(),
        "composition_check": composition_check(fitted, mixed),
        **meta,
        "load_average_after": os.getloadavg(),
        "wall_s": round(time.perf_counter() - started, 1),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
    }
    write_profile(df, out, meta)
    return df
