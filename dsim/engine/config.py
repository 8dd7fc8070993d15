"""Engine limits and the drafter's cost model."""

from __future__ import annotations

from dataclasses import dataclass
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
