"""Engine limits, the drafter's cost model and the synchronous scheduler's per-round cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dsim.checks import parse_number
from dsim.errors import InputError
from dsim.hardware.latency import LatencyModel


@dataclass(frozen=True)
class EngineConfig:
    """One replica's limits: drafts per round, concurrency, KV cache and prefill chunking."""

    gamma: int = 7
    max_seqs: int = 256
    kv_tokens: int = 500_000
    block_size: int = 16
    prefill_chunk: int = 2048
    sched: SchedCost = field(default_factory=lambda: SchedCost())

    def __post_init__(self) -> None:
        for name in ("gamma", "max_seqs", "kv_tokens", "block_size", "prefill_chunk"):
            if getattr(self, name) < 1:
                raise InputError(None, None, f"--{name.replace('_', '-')} must be >= 1")

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // self.block_size


@dataclass(frozen=True)
class DraftCost:
    """Drafter time per round: 0, a ratio of the target step at the same number of sequences,
    or a drafter profile read at batch_tokens = number of drafting sequences."""

    ratio: float = 0.0
    profile: LatencyModel | None = None

    def seconds(self, num_seqs: int, context_len: float, target: LatencyModel) -> float:
        if self.profile is not None:
            return float(self.profile.latency(num_seqs, context_len))
        return self.ratio * float(target.latency(num_seqs, context_len)) if self.ratio else 0.0


def parse_draft_cost(spec: str) -> DraftCost:
    """`0`, `ratio:X` or the path of a drafter profile CSV (docs/design.md, The step-time model)."""
    if spec.strip() == "0":
        return DraftCost()
    if spec.startswith("ratio:"):
        return DraftCost(ratio=parse_number(spec[6:], f"--draft-cost {spec!r}: ratio", ge=0))
    if not Path(spec).exists():
        raise InputError(spec, None, "--draft-cost: expected 0, ratio:X or a drafter profile CSV")
    return DraftCost(profile=LatencyModel.from_csv(spec))


# `--sched-cost auto` (docs/policies.md, "scheduling cost"): an assumed host sync (no GPU was at
# hand to measure one) plus a linear fit of benchmarks/bench_policies.py's dspark_lengths time
# with an SPS table at R = 32, 128, 256 (75.9, 119.6, 278.1 us; 2-core VM at load 2-3).
HOST_SYNC_S = 20e-6
SCHED_BASE_S = 30.2e-6
SCHED_PER_REQUEST_S = 0.92e-6


@dataclass(frozen=True)
class SchedCost:
    """Per-round cost of a synchronous scheduler (the verify pass waits for it): a device sync
    plus the scheduler's own time, base_s + per_request_s * R."""

    base_s: float = 0.0
    per_request_s: float = 0.0

    def seconds(self, num_seqs: int) -> float:
        return self.base_s + self.per_request_s * num_seqs


def parse_sched_cost(spec: str) -> SchedCost:
    """`auto` (measured default), `auto:F` (F times it) or a constant in SECONDS."""
    kind, _, factor = spec.partition(":")
    try:
        if kind == "auto":
            f = float(factor) if factor else 1.0
            if f >= 0:
                return SchedCost(f * (HOST_SYNC_S + SCHED_BASE_S), f * SCHED_PER_REQUEST_S)
        elif not factor and float(spec) >= 0:
            return SchedCost(float(spec))
    except ValueError:
        pass
    raise InputError(None, None, f"--sched-cost {spec!r}: expected auto, auto:F or SECONDS >= 0")
