"""What a simulation is asked to do, as the user spelled it: the one place each run default lives.

`RunSpec` is the hashable, picklable description a sweep caches on and a worker process
receives; its strings are read once per run by `dsim.run_inputs.resolve`, never by the layers
below. The CLI's options take their defaults from here (`default`).
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from dsim.checks import check_number
from dsim.engine.config import EngineConfig, check_ragged_penalty
from dsim.errors import InputError

_ENGINE = EngineConfig()  # the engine's own limits are defaulted where the engine defines them
# engine: the profile's engine rule; mixed: prefill chunks share the decode step (vLLM,
# TensorRT-LLM); separate: a step with prefill work runs no decode (SGLang's prefill first)
PREFILL_MIXING = ("engine", "mixed", "separate")
# engine: the profile's engine rule; recompute: admit on the prompt's KV, preempt by recompute
# (vLLM, SGLang); reserve: admit on the prompt's and every output token's KV, never preempt
# (TensorRT-LLM's GUARANTEED_NO_EVICT)
ADMISSION = ("engine", "recompute", "reserve")

DEFAULT_TRACE = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
DEFAULT_PROFILE = "profiles/h200-qwen3-8b-roofline.csv"
DEFAULT_ACCEPTANCE = "preset:dspark:chat"

# The largest value each count may take (checked before any work; README, "dsim run"): beyond
# them an array would not fit in memory or a seed in a Parquet int64 column.
MAX_COUNTS = {
    "gamma": 64,
    "max_seqs": 65536,
    "kv_tokens": 2**40,
    "prefill_chunk": 2**31 - 1,
    "max_requests": 2**40,
    "max_num_batched_tokens": 2**31 - 1,
    "seed": 2**63 - 1,
}


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything that determines a simulation's output (hashable, so sweeps can cache it)."""

    trace: str = DEFAULT_TRACE
    profile: str = DEFAULT_PROFILE
    acceptance: str = DEFAULT_ACCEPTANCE
    policy: str = "dspark"
    gamma: int = _ENGINE.gamma
    seed: int = 0
    window: str | None = None  # on the rate-scaled timeline
    window_wrap: bool = False  # a window past the trace's end replays the trace end to end
    rate_scale: float = 1.0
    max_requests: int | None = None
    max_seqs: int = _ENGINE.max_seqs
    # None: the profile's engine decides (`run_inputs.engine_config`): its KV capacity, its
    # step token budget, its prefill chunk and whether prefill shares the decode step
    kv_tokens: int | None = None
    prefill_chunk: int | None = None
    max_num_batched_tokens: int | None = None
    prefill_mixing: str = "engine"  # engine | mixed | separate (PREFILL_MIXING)
    admission: str = "engine"  # engine | recompute | reserve (ADMISSION)
    draft_cost: str = "ratio:0.1"
    sla_tps: float | None = None
    calibration: str | None = None
    sched_cost: str = "auto"  # per-round cost of synchronous schedulers (docs/policies.md)
    drafter_kind: str = "auto"  # auto | block | ar | mtp1 (engine.config.drafter_kind)
    replicas: int = 1
    router: str = "round-robin"
    disagg: str | None = None  # "P:D": prefill and decode replicas (replaces replicas)
    kv_link_gbps: float = 400.0
    kv_bytes_per_token: float | None = None  # None: from the profile's sidecar
    fused_prefill: bool = _ENGINE.fused_prefill  # False: prefill as a pass of its own (real mode)
    ragged_penalty: float | None = None  # None: the profile's engine prior (0 without one)

    def __post_init__(self) -> None:
        """Every number finite and in range (a NaN rate or SLA would stall simulated time);
        the topology's own settings are checked when the spec is resolved."""
        for name in ("gamma", "max_seqs"):
            check_number(getattr(self, name), name, ge=1, le=MAX_COUNTS[name], integer=True)
        check_number(self.seed, "seed", ge=0, le=MAX_COUNTS["seed"], integer=True)
        check_number(self.rate_scale, "rate_scale", gt=0)
        for name in ("max_requests", "kv_tokens", "prefill_chunk", "max_num_batched_tokens"):
            if getattr(self, name) is not None:
                check_number(getattr(self, name), name, ge=1, le=MAX_COUNTS[name], integer=True)
        if self.prefill_mixing not in PREFILL_MIXING:
            raise InputError(
                None,
                None,
                f"--prefill-mixing must be one of {', '.join(PREFILL_MIXING)}, "
                f"got {self.prefill_mixing!r}",
            )
        if self.admission not in ADMISSION:
            raise InputError(
                None,
                None,
                f"--admission must be one of {', '.join(ADMISSION)}, got {self.admission!r}",
            )
        if self.sla_tps is not None:
            check_number(self.sla_tps, "sla_tps", gt=0)
        if self.ragged_penalty is not None:
            check_ragged_penalty(self.ragged_penalty)

    def as_dict(self) -> dict:
        return asdict(self)


SPEC_FIELDS = tuple(f.name for f in fields(RunSpec))
# The fields `dsim run` takes as options (a sweep's [run] table takes the same); fused_prefill
# is set by real mode and the validation study, never by a user.
RUN_OPTIONS = tuple(f for f in SPEC_FIELDS if f != "fused_prefill")
# vLLM's names for the same settings: `dsim run` takes them as options, [run] as keys.
VLLM_NAMES = {"num_speculative_tokens": "gamma", "max_num_seqs": "max_seqs"}
_DEFAULTS = {f.name: f.default for f in fields(RunSpec) if f.default is not MISSING}


def default(name: str) -> Any:
    """The default of RunSpec field `name` (for the CLI's options)."""
    return _DEFAULTS[name]
