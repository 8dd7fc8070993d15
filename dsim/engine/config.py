"""Engine limits, the drafter's cost model and the synchronous scheduler's per-round cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dsim import spec_grammar
from dsim.errors import InputError
from dsim.hardware.gpu_model import SpecRound
from dsim.hardware.latency import LatencyModel, StepPrice

MAX_RAGGED_PENALTY = 10.0  # an 11x step is no engine's graph fallback: a typo, refused


@dataclass(frozen=True)
class EngineShape:
    """What an engine-side scheduler that profiles the engine at startup reads of it (the
    profile's sidecar): the verify token counts its CUDA graphs capture (increasing; empty:
    none) and the target's vocabulary (0: unknown), which sizes the sampler's logits chunk."""

    capture_sizes: tuple[int, ...] = ()
    vocab: int = 0


@dataclass(frozen=True)
class EngineConfig:
    """One replica's limits: drafts per round, concurrency, KV cache and prefill chunking, and
    whether a step's prefill chunks share the verify pass (fused, vLLM's chunked prefill) or run
    as a pass of their own (dsim's real mode), which pays the step's fixed cost twice."""

    gamma: int = 7
    max_seqs: int = 256
    kv_tokens: int = 500_000
    block_size: int = 16
    prefill_chunk: int = 2048
    fused_prefill: bool = True
    sched: SchedCost = field(default_factory=lambda: SchedCost())
    # vLLM's max_num_batched_tokens: verify and prefill tokens of one step together; the
    # running requests' verify tokens (at most 1 + gamma each) are reserved first and prefill
    # chunks fill the rest. None: prefill takes `prefill_chunk` whatever the verify pass holds.
    token_budget: int | None = None
    # False: a step with prefill work runs no decode round (SGLang schedules prefill first)
    mixed_prefill: bool = True
    # True: a request is admitted only when the KV blocks of its prompt and of every token it
    # will emit are free, and holds them until it ends, so no request is ever preempted
    # (TensorRT-LLM's GUARANTEED_NO_EVICT); False: admitted on its prompt's blocks, the newest
    # request preempted by recompute when a round's KV does not fit (vLLM, SGLang).
    reserve_output: bool = False
    # A decode step whose requests verify different lengths (rows at their output cap aside)
    # pays (1 + ragged_penalty) x its target pass, unless it is fused with prefill, which the
    # engines dsim models run without full CUDA graphs anyway (docs/design.md, Ragged verify).
    ragged_penalty: float = 0.0
    shape: EngineShape = EngineShape()

    def __post_init__(self) -> None:
        for name in ("gamma", "max_seqs", "kv_tokens", "block_size", "prefill_chunk"):
            if getattr(self, name) < 1:
                raise InputError(None, None, f"--{name.replace('_', '-')} must be >= 1")
        if self.token_budget is not None and self.token_budget < 1 + self.gamma:
            raise InputError(
                None,
                None,
                f"--max-num-batched-tokens {self.token_budget} is below 1 + gamma = "
                f"{1 + self.gamma}, one request's verify pass: raise it or lower --gamma",
            )
        check_ragged_penalty(self.ragged_penalty)

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // self.block_size


def check_ragged_penalty(value: object, where: str = "--ragged-penalty") -> float:
    """A penalty in 0..MAX_RAGGED_PENALTY (InputError naming `where` otherwise)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not (ok and 0.0 <= value <= MAX_RAGGED_PENALTY):  # NaN fails both comparisons
        raise InputError(
            None,
            None,
            f"{where} must be a number in 0..{MAX_RAGGED_PENALTY:g} (the extra share of a ragged "
            f"step's target pass, e.g. 0.19), got {value!r}",
        )
    return float(value)


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
    """Drafter time per round, priced by its passes (docs/design.md, Drafter and scheduler
    cost): a parallel block drafter makes one pass over R x gamma tokens, an MTP-1 head one pass
    over R tokens, an autoregressive drafter gamma passes, the first over every verify position
    (R x (1 + gamma) tokens: vLLM's padded drafter batch, SGLang's draft-extend, TensorRT-LLM's
    first MTP call) and the others over R. A pass's work costs `ratio` times the target's
    verify step for the same tokens and sequences, or what a drafter profile says for them
    (`LatencyModel.latency`); the engine's speculative machinery (`spec_round`, from the target
    profile's engine preset) makes a pass cost at least its host time per proposer step and
    adds its per-round cost."""

    ratio: float = 0.0
    profile: LatencyModel | None = None
    kind: str = "block"
    spec_round: SpecRound = SpecRound()

    def seconds(
        self, num_seqs: int, gamma: int, context_len: float, target: LatencyModel | StepPrice
    ) -> float:
        """Drafter seconds per round; `target` prices the target's verify step (a `StepPrice`
        of the step at hand looks it up fastest)."""
        rule = self.spec_round
        if self.kind == "ar":
            first = rule.pass_seconds(
                self._work(num_seqs * (1 + gamma), num_seqs, context_len, target)
            )
            if gamma <= 1:
                return rule.per_round_s + first
            rest = rule.pass_seconds(self._work(num_seqs, num_seqs, context_len, target))
            return rule.per_round_s + first + (gamma - 1) * rest
        tokens = num_seqs * gamma if self.kind == "block" else num_seqs
        return rule.per_round_s + rule.pass_seconds(
            self._work(tokens, num_seqs, context_len, target)
        )

    def _work(
        self, tokens: int, num_seqs: int, context_len: float, target: LatencyModel | StepPrice
    ) -> float:
        """One pass's work over `tokens` tokens: the drafter profile's, a ratio of the
        target's, or none."""
        if self.profile is not None:
            return float(self.profile.latency(tokens, num_seqs, context_len))
        if self.ratio:
            return self.ratio * float(target.latency(tokens, num_seqs, context_len))
        return 0.0


def parse_draft_cost(
    spec: str,
    kind: str = "block",
    spec_round: SpecRound = SpecRound(),
    read: spec_grammar.DraftCostSpec | None = None,
) -> DraftCost:
    """`0`, `ratio:X` or the path of a drafter profile CSV, for a drafter of `kind`, with the
    engine's speculative machinery `spec_round` (docs/design.md, The step-time model); `read`:
    `spec` as the caller already read it."""
    read = spec_grammar.draft_cost(spec) if read is None else read
    if read.profile is None:
        return DraftCost(ratio=read.ratio, kind=kind, spec_round=spec_round)
    if not Path(read.profile).is_file():
        what = "is a folder" if Path(read.profile).is_dir() else "no such file"
        raise InputError(
            spec, None, f"--draft-cost: {what}; expected 0, ratio:X or a drafter profile CSV"
        )
    return DraftCost(profile=LatencyModel.from_csv(read.profile), kind=kind, spec_round=spec_round)


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
    read = spec_grammar.sched_cost(spec)
    if read.factor is None:
        return SchedCost(read.seconds)
    f = read.factor
    return SchedCost(f * (HOST_SYNC_S + SCHED_BASE_S), f * SCHED_PER_REQUEST_S)
