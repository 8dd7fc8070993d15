"""Engine limits and the drafter's cost model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


DRAFTER_KINDS = ("auto", "block", "ar", "mtp1")


def drafter_kind(policy: str, kind: str = "auto") -> str:
    """The drafter a policy runs: `auto` is the MTP-1 head for `mtp1` and the gamma-block
    drafter for every other drafting policy (`ar` runs none)."""
    if kind not in DRAFTER_KINDS:
        raise InputError(
            None, None, f"--drafter-kind must be one of {', '.join(DRAFTER_KINDS)}, got {kind!r}"
        )
    if kind != "auto":
        return kind
    return "mtp1" if policy == "mtp1" else "block"


@dataclass(frozen=True)
class DraftCost:
    """Drafter time per round, priced by its passes (docs/design.md, drafters): a parallel
    block drafter makes one pass over R x gamma tokens, an autoregressive drafter gamma passes
    over R tokens, an MTP-1 head one pass over R tokens. A pass costs `ratio` times the
    target's verify step for the same tokens and sequences, or what a drafter profile says
    for them (`LatencyModel.latency`)."""

    ratio: float = 0.0
    profile: LatencyModel | None = None
    kind: str = "block"

    def passes(self, num_seqs: int, gamma: int) -> tuple[int, int]:
        """(passes per round, tokens per pass)."""
        if self.kind == "ar":
            return gamma, num_seqs
        return 1, num_seqs * (gamma if self.kind == "block" else 1)

    def seconds(self, num_seqs: int, gamma: int, context_len: float, target: LatencyModel) -> float:
        passes, tokens = self.passes(num_seqs, gamma)
        if self.profile is not None:
            return passes * float(self.profile.latency(tokens, num_seqs, context_len))
        if not self.ratio:
            return 0.0
        return passes * self.ratio * float(target.latency(tokens, num_seqs, context_len))


def parse_draft_cost(spec: str, kind: str = "block") -> DraftCost:
    """`0`, `ratio:X` or the path of a drafter profile CSV, for a drafter of `kind`."""
    if spec.strip() == "0":
        return DraftCost(kind=kind)
    if spec.startswith("ratio:"):
        try:
            ratio = float(spec[6:])
        except ValueError:
            ratio = -1.0
        if ratio < 0:
            raise InputError(None, None, f"--draft-cost {spec!r}: ratio must be a number >= 0")
        return DraftCost(ratio=ratio, kind=kind)
    if not Path(spec).exists():
        raise InputError(spec, None, "--draft-cost: expected 0, ratio:X or a drafter profile CSV")
    return DraftCost(profile=LatencyModel.from_csv(spec), kind=kind)
