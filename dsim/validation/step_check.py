"""Real steps against the step-time model: time a real run's model passes, price its own
batches with the profiles, and calibrate the profiles on a separate burst.

A wall-clock step W of real mode is the model passes M (drafter draft, target forward, LM head
and softmax) plus the engine's and backend's own time (scheduling, sampling, bookkeeping). A
profile measures passes alone, in isolation, so priced on a run's own batches it predicts P
for M, not W. `dsim validate` therefore serves short bursts before its measured runs
(`dsim.validation.bursts`): per policy, a burst of 2 and a burst of 8 requests, and measures

    pass factor k = sum M / sum P,   engine overhead per step o = a + b R + c V

(R running sequences, V verify tokens) fitted by non-negative least squares on the bursts'
per-run totals, sum(W - M) = a steps + b sum R + c sum V. The burst sizes vary R, the policies
V per sequence: the overhead grows with both, so a constant fitted on bursts of many
sequences over-charges runs of few (the validation study's README). The simulations use
*engine-calibrated* profiles: every target profile row becomes k x latency + a + b R (+ c B on
verify rows; R a prefill row's prefilling sequences), so a mixed step pays a once (the step
model's fixed term carries it); every drafter profile row k x latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dsim.engine.config import DraftCost, EngineConfig
from dsim.hardware.latency import LatencyModel, profile_metadata, read_profile, write_profile
from dsim.real.backend import RealBackend
from dsim.real.runner import RealRun

LATENCY_COLUMNS = ("latency_ms", "latency_ms_p10", "latency_ms_p90")


class _TimedDrafter:
    """A drafter whose draft() time is added to its backend's model time."""

    def __init__(self, inner, backend: TimedBackend) -> None:
        self._inner, self._backend = inner, backend

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def draft(self, *args, **kwargs):
        return self._backend.timed(self._inner.draft, *args, **kwargs)


@dataclass(frozen=True)
class PassClocks:
    """The two clocks the model passes are timed by. Wall time (`perf_counter`) sees
    everything a real step pays, other processes' preemption included: it is what real mode's
    steps and so the validation are judged by. The thread's CPU time (`thread_time`, 1 torch
    thread: the passes run on the calling thread) counts only the time the thread ran, so it
    leaves out preemption by other processes and any wait, but it still sees a core that runs
    slower while the thread is on it (frequency, other processes' pressure on the shared
    caches and memory bandwidth). Wall / CPU well above 1 says the machine was busy; a pass
    factor that moves on both clocks says the core itself got slower."""

    wall: Callable[[], float] = time.perf_counter
    cpu: Callable[[], float] = time.thread_time


class ReferencePass(Protocol):
    """What the backend needs of a reference (`dsim.validation.reference.Reference`)."""

    every: int

    def measure(self) -> None: ...


class TimedBackend(RealBackend):
    """The real backend, timing its model passes (drafter draft, target forward, LM head and
    softmax) on both `PassClocks`: the rest of a wall-clock step is the engine's and backend's
    own overhead. With a `reference` (`dsim.validation.reference`), every `reference.every`-th
    verify first times a reference pass, outside the run's clock."""

    def __init__(
        self,
        *args,
        clocks: PassClocks = PassClocks(),
        reference: ReferencePass | None = None,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.clocks, self.reference, self.verifies = clocks, reference, 0
        self.model_s = self.model_cpu_s = 0.0
        forward, probs = self.passes.forward, self.passes.probs
        self.passes.forward = lambda *a, **k: self.timed(forward, *a, **k)
        self.passes.probs = lambda *a, **k: self.timed(probs, *a, **k)
        if self.drafter is not None:
            self.drafter = _TimedDrafter(self.drafter, self)

    def verify(
        self, idx: np.ndarray, lengths: np.ndarray, truth: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self.verifies += 1
        if self.reference is not None and self.verifies % self.reference.every == 0:
            self.reference.measure()
        return super().verify(idx, lengths, truth)

    def timed(self, fn, *args, **kwargs):
        wall, cpu = self.clocks.wall(), self.clocks.cpu()
        try:
            return fn(*args, **kwargs)
        finally:
            self.model_cpu_s += self.clocks.cpu() - cpu
            self.model_s += self.clocks.wall() - wall


def priced_steps(
    run: RealRun,
    profile: Path,
    draft_profile: Path,
    speed: Callable[[np.ndarray], np.ndarray] | None = None,
) -> pd.DataFrame:
    """The real run's steps, each with the step-time model's price (target profile + drafter
    profile) for its own batch, times the core's `speed` at its start where given (a run's
    `reference.SpeedTrace`): shape, context, speed, real and predicted seconds. Context per
    sequence is approximated from the step's KV blocks (the log keeps no more), and a step's
    prefill work is taken as one sequence's."""
    latency = LatencyModel.from_csv(profile)
    draft = DraftCost(profile=LatencyModel.from_csv(draft_profile), kind="block")
    steps = run.result.steps
    prefilling = (steps.prefill_tokens > 0).astype(np.int64)
    ctx = (
        steps.kv_blocks_used
        * EngineConfig.block_size
        / np.maximum(steps.num_running + prefilling, 1)
    )
    drafting, fused = run.engine.policy.drafts, run.spec.fused_prefill
    predicted = [
        (draft.seconds(int(r), run.spec.gamma, c, latency) if r and drafting else 0.0)
        + float(latency.step(int(b - p), int(r), c, int(p), int(k), c, fused))
        for r, b, p, k, c in zip(
            steps.num_running,
            steps.batch_tokens,
            steps.prefill_tokens,
            prefilling,
            ctx,
            strict=True,
        )
    ]
    scale = np.ones(len(ctx)) if speed is None else speed(steps.start_s)
    return pd.DataFrame(
        {
            "start_s": steps.start_s,
            "num_running": steps.num_running,
            "batch_tokens": steps.batch_tokens,
            "prefill_tokens": steps.prefill_tokens,
            "context_len": ctx,
            "speed": scale,
            "real_s": steps.latency_s,
            "predicted_s": np.asarray(predicted, np.float64) * scale,
        }
    )


def step_model_check(priced: pd.DataFrame) -> dict[str, float]:
    """Predicted vs measured busy time of `priced_steps`, for decode-only steps and for steps
    with prefill work."""
    out = {}
    prefill = priced["prefill_tokens"].to_numpy()
    for name, keep in (
        ("decode", prefill == 0),
        ("with_prefill", prefill > 0),
        ("all", prefill >= 0),
    ):
        real = float(priced["real_s"].to_numpy()[keep].sum())
        pred = float(priced["predicted_s"].to_numpy()[keep].sum())
        out[f"{name}_steps"] = int(keep.sum())
        out[f"{name}_real_s"] = real
        out[f"{name}_predicted_s"] = pred
        out[f"{name}_error"] = (pred - real) / real if real else float("nan")
    return out


def verify_tokens(steps: Any) -> np.ndarray:
    """V of each step (a step log or a `steps.csv` frame): its batch tokens less its prefill
    tokens, what the overhead o = a + b R + c V counts."""
    return np.asarray(steps.batch_tokens) - np.asarray(steps.prefill_tokens)


def run_totals(run: RealRun, predicted_s: float) -> dict[str, float]:
    """One real run's step totals: its requests, steps, sum R, sum V, W, M (wall, and on the
    thread's CPU clock) and P (the profiles' prediction)."""
    steps = run.result.steps
    return {
        "requests": len(run.result.requests),
        "steps": len(steps.latency_s),
        "seqs": float(steps.num_running.sum()),
        "verify_tokens": float(verify_tokens(steps).sum()),
        "wall_s": float(steps.latency_s.sum()),
        "model_s": run.backend.model_s,
        "model_cpu_s": run.backend.model_cpu_s,
        "predicted_s": predicted_s,
    }


def priced_totals(runs: list[RealRun], profile: Path, draft_profile: Path) -> list[dict]:
    """`run_totals` of real runs (each served by a `TimedBackend`), P from the given profiles."""
    return [
        run_totals(
            run, step_model_check(priced_steps(run, profile, draft_profile))["all_predicted_s"]
        )
        for run in runs
    ]


@dataclass(frozen=True)
class EngineCalibration:
    """What the burst runs measured (module doc): k, o = a + b R + c V, and the totals."""

    pass_factor: float  # k = sum M / sum P
    per_step_s: float  # a
    per_seq_s: float  # b
    per_token_s: float  # c, per verify token
    runs: tuple[dict[str, float], ...]  # run_totals of every burst run

    @classmethod
    def fit(cls, runs: list[dict[str, float]]) -> EngineCalibration:
        """k and (a, b, c) >= 0 from per-run totals (`run_totals`)."""
        col = {k: np.array([r[k] for r in runs], dtype=np.float64) for k in runs[0]}
        design = np.column_stack([col["steps"], col["seqs"], col["verify_tokens"]])
        (a, b, c), _ = nnls(design, col["wall_s"] - col["model_s"])
        k = col["model_s"].sum() / col["predicted_s"].sum()
        return cls(float(k), float(a), float(b), float(c), tuple(runs))

    @classmethod
    def measure(cls, runs: list[RealRun], profile: Path, draft_profile: Path) -> EngineCalibration:
        """Fit on real runs (each served by a `TimedBackend`) against the raw profiles."""
        return cls.fit(priced_totals(runs, profile, draft_profile))

    def overhead_s(self, seqs: Any, verify_tokens: Any, steps: Any = 1) -> Any:
        """a steps + b R + c V: o of one step (R and V scalars or arrays), or of a run in all
        from its totals (`run_totals`: steps, sum R, sum V)."""
        return self.per_step_s * steps + self.per_seq_s * seqs + self.per_token_s * verify_tokens

    def step_overheads(self, steps: Any) -> np.ndarray:
        """(n,) o of each step of a step log or a `steps.csv` frame."""
        return self.overhead_s(np.asarray(steps.num_running), verify_tokens(steps))

    def apply(self, profile: Path, out: Path, overhead: bool) -> None:
        """Write `profile` engine-calibrated to `out`: k x latency, plus o when `overhead`
        (the target's profile; a drafter profile gets k alone)."""
        df = read_profile(profile)
        add_ms: Any = 0.0
        if overhead:
            seqs = df["num_seqs"].to_numpy() if "num_seqs" in df else 1.0
            tokens = np.where(df["phase"] == "verify", df["batch_tokens"], 0)
            add_ms = 1e3 * self.overhead_s(seqs, tokens)
        for col in LATENCY_COLUMNS:
            if col in df:
                df[col] = df[col] * self.pass_factor + add_ms
        note = "k x latency + a + b R + c B (B on verify rows)" if overhead else "k x latency"
        meta = profile_metadata(profile) | {
            "engine_calibration": {**asdict(self), "applied": note, "source": str(profile)}
        }
        write_profile(df, out, meta)
