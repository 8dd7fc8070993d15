"""Real steps against the step-time model: time a real run's model passes, price its own
batches with the profiles, and calibrate the profiles on a separate burst (issue 17).

A wall-clock step W of real mode is the model passes M (drafter draft, target forward, LM head
and softmax) plus the engine's and backend's own time (scheduling, sampling, bookkeeping). A
profile measures passes alone, in isolation, so priced on a run's own batches it predicts P
for M, not W. `dsim validate` therefore serves one short burst per policy before its measured
runs (the rule, fixed before the v6 report):

    pass factor k = sum M / sum P,   engine overhead o = (sum W - sum M) / steps

pooled over the burst runs, and simulates with *engine-calibrated* profiles: every target
profile row becomes k x latency + o (a mixed step pays o once: the step model's fixed term
carries it), every drafter profile row k x latency.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from dsim.engine.config import DraftCost, EngineConfig
from dsim.hardware.latency import LatencyModel, profile_metadata, read_profile, write_profile
from dsim.policies import parse_policy
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


class TimedBackend(RealBackend):
    """The real backend, timing its model passes (drafter draft, target forward, LM head and
    softmax): the rest of a wall-clock step is the engine's and backend's own overhead."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model_s = 0.0
        forward, probs = self.passes.forward, self.passes.probs
        self.passes.forward = lambda *a, **k: self.timed(forward, *a, **k)
        self.passes.probs = lambda *a, **k: self.timed(probs, *a, **k)
        if self.drafter is not None:
            self.drafter = _TimedDrafter(self.drafter, self)

    def timed(self, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.model_s += time.perf_counter() - start


def step_model_check(run: RealRun, profile: Path, draft_profile: Path) -> dict[str, float]:
    """The step-time model (target profile + drafter profile) on the real run's own batches:
    predicted vs measured busy time, for decode-only steps and for steps with prefill work.
    Context per sequence is approximated from the step's KV blocks (the log keeps no more),
    and a step's prefill work is taken as one sequence's."""
    latency = LatencyModel.from_csv(profile)
    draft = DraftCost(profile=LatencyModel.from_csv(draft_profile), kind="block")
    steps = run.result.steps
    prefilling = (steps.prefill_tokens > 0).astype(np.int64)
    ctx = (
        steps.kv_blocks_used
        * EngineConfig.block_size
        / np.maximum(steps.num_running + prefilling, 1)
    )
    drafting = parse_policy(run.spec.policy).drafts
    predicted = np.array(
        [
            (draft.seconds(int(r), run.spec.gamma, c, latency) if r and drafting else 0.0)
            + float(latency.step(int(b - p), int(r), c, int(p), int(k), c))
            for r, b, p, k, c in zip(
                steps.num_running,
                steps.batch_tokens,
                steps.prefill_tokens,
                prefilling,
                ctx,
                strict=True,
            )
        ]
    )
    out = {}
    for name, keep in (
        ("decode", steps.prefill_tokens == 0),
        ("with_prefill", steps.prefill_tokens > 0),
        ("all", steps.prefill_tokens >= 0),
    ):
        real, pred = float(steps.latency_s[keep].sum()), float(predicted[keep].sum())
        out[f"{name}_steps"] = int(keep.sum())
        out[f"{name}_real_s"] = real
        out[f"{name}_predicted_s"] = pred
        out[f"{name}_error"] = (pred - real) / real if real else float("nan")
    return out


@dataclass(frozen=True)
class EngineCalibration:
    """What the burst runs measured (module doc): k, o and the totals they come from."""

    pass_factor: float  # k = sum M / sum P
    overhead_s: float  # o = (sum W - sum M) / steps
    steps: int
    wall_s: float  # sum W
    model_s: float  # sum M
    predicted_s: float  # sum P (the uncalibrated profiles)

    @classmethod
    def measure(cls, runs: list[RealRun], profile: Path, draft_profile: Path) -> EngineCalibration:
        """Pool the runs (each served by a `TimedBackend`) against the raw profiles."""
        checks = [step_model_check(run, profile, draft_profile) for run in runs]
        steps = sum(c["all_steps"] for c in checks)
        wall = sum(c["all_real_s"] for c in checks)
        model = sum(run.backend.model_s for run in runs)
        predicted = sum(c["all_predicted_s"] for c in checks)
        return cls(model / predicted, (wall - model) / steps, steps, wall, model, predicted)

    def apply(self, profile: Path, out: Path, overhead: bool) -> None:
        """Write `profile` engine-calibrated to `out`: k x latency, plus o when `overhead`
        (the target's profile; a drafter profile gets k alone)."""
        df = read_profile(profile)
        add_ms = 1e3 * self.overhead_s if overhead else 0.0
        for col in LATENCY_COLUMNS:
            if col in df:
                df[col] = df[col] * self.pass_factor + add_ms
        note = "k x latency + o" if overhead else "k x latency"
        meta = profile_metadata(profile) | {
            "engine_calibration": {**asdict(self), "applied": note, "source": str(profile)}
        }
        write_profile(df, out, meta)
