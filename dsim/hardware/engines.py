"""Engine presets: what a serving engine adds to the GPU work of a step (docs/design.md, The
step-time model; profiles/README.md, Engine presets).

A preset is the engine's step terms (`StepOverhead`: per step, per layer, per MoE layer, per
sequence, per sampled token; fitted on published end-to-end runs of that engine, or a stated
prior where its runs cannot pin a term), its speculative round cost (`SpecRound`, fitted on
published speculative runs, `round_fit`), the penalty on a step whose verify lengths differ
between requests (`RAGGED`, a prior) and its scheduling behaviour where engines differ: whether
a prefill chunk shares a step with decode work, and the step's token budget. The terms come
from `engine_fit` and `round_fit` (deterministic, computed when first asked for), so a
sidecar's numbers are always the fits'.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from dsim.errors import InputError
from dsim.hardware.gpu_model import SpecRound, StepOverhead

DEFAULT_ENGINE = "vllm"


@dataclass(frozen=True)
class Scheduling:
    """How the engine fills a step, from its documentation: recorded in the sidecar and, unless
    a run sets them, the run's defaults (`dsim.run_inputs.resolve_engine`)."""

    mixed_prefill: bool  # prefill chunks share a step with decode work (False: prefill first)
    token_budget: int | None  # tokens per step (prefill + verify); None: no step budget
    prefill_chunk: int | None  # prefill tokens per step; None: what the budget leaves
    source: str

    @classmethod
    def from_record(cls, record: dict, where: str) -> Scheduling:
        """The sidecar's `engine.scheduling` entry, checked (InputError naming `where`)."""
        try:
            mixed, budget = record["mixed_prefill"], record["token_budget"]
            chunk = record.get("prefill_chunk")
        except (KeyError, TypeError):
            raise InputError(
                where, None, "engine.scheduling needs mixed_prefill and token_budget"
            ) from None
        if not isinstance(mixed, bool):
            raise InputError(
                where, None, f"engine.scheduling.mixed_prefill must be true or false, got {mixed!r}"
            )
        for name, value in (("token_budget", budget), ("prefill_chunk", chunk)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31
            ):
                raise InputError(
                    where,
                    None,
                    f"engine.scheduling.{name} must be null or an integer in "
                    f"1..2^31, got {value!r}",
                )
        return cls(mixed, budget, chunk, str(record.get("source", "")))


@dataclass(frozen=True)
class Ragged:
    """The multiplier (1 + penalty) on the target pass of a step whose requests verify
    different lengths (docs/design.md, Ragged verify lengths): a prior, with its source."""

    penalty: float
    low: float
    high: float
    source: str


RAGGED_PRIOR = Ragged(
    round(1 / 0.84 - 1, 4),
    0.0,
    round(1 / 0.84 - 1, 4),
    "vLLM falls back from full to piecewise CUDA graphs when speculation changes the verify "
    "length at run time: -16% single-stream decode throughput measured (MTP k=2, "
    "Qwen3.5-122B-A10B, GB10; vLLM GitHub reports #49547 and #49548), i.e. steps 1/0.84 = "
    "1.19x. Range 0 (an engine that keeps a graph per ragged shape; on H100 full and "
    "piecewise graphs were on par for an 8B EAGLE drafter, vllm-project/vllm pull 21477) to "
    "the measured 0.19, which a bandwidth-poor GB10 makes unusually visible",
)
NO_RAGGED = Ragged(0.0, 0.0, 0.0, "no CUDA graphs to fall back from")
BORROWED = "borrowed from sglang (this engine has no speculative row)"


@dataclass(frozen=True)
class Engine:
    """One preset: its name, what it stands for, the version fitted on, terms and scheduling."""

    name: str
    description: str
    fitted_on: str
    terms: StepOverhead
    scheduling: Scheduling
    spec_round: SpecRound = SpecRound()
    spec_round_source: str = "none (no speculative machinery priced)"
    ragged: Ragged = NO_RAGGED

    def record(self, scale: float = 1.0) -> dict:
        """What a profile sidecar says about the engine (terms as charged, after `scale`).
        A run reads `spec_round.terms_s` and `ragged.penalty` from here (`run_inputs`)."""
        return {
            "name": self.name,
            "description": self.description,
            "fitted_on": self.fitted_on,
            "overhead_scale": scale,
            "terms_s": asdict(self.terms.scaled(scale)),
            "fitted_terms_s": asdict(self.terms),
            "scheduling": asdict(self.scheduling),
            "spec_round": {
                "terms_s": asdict(self.spec_round.scaled(scale)),
                "fitted_terms_s": asdict(self.spec_round),
                "source": self.spec_round_source,
            },
            "ragged": asdict(self.ragged) | {"penalty": self.ragged.penalty * scale},
        }


def _vllm_scheduling(gpu: str | None) -> Scheduling:
    """vLLM V1's step filling; its default token budget depends on the GPU."""
    budget = 2048 if gpu == "a100" else 8192
    return Scheduling(
        True,
        budget,
        None,
        "vLLM V1 always chunks prefill into decode steps, up to the step token budget; "
        "max_num_batched_tokens defaults to 8192 for the API server on H100/H200 (by device "
        "name, 0.8.4 included; since 0.9 on any GPU of >= 70 GB other than A100; "
        "vllm/engine/arg_utils.py), 2048 on other GPUs",
    )


ENGINES: dict[str, str] = {
    "vllm": "vLLM V1 with CUDA graphs (torch.compile + piecewise graphs)",
    "sglang": "SGLang with CUDA graphs",
    "trtllm": "TensorRT-LLM (as behind NVIDIA NIM)",
    "vllm-2023": "vLLM 2023 in eager mode (no CUDA graphs), fitted on Splitwise",
    "gpu-only": "GPU work only: no engine overhead (the bound a perfect engine approaches)",
}


def names() -> str:
    return ", ".join(ENGINES)


def get_engine(name: str, gpu: str | None = None) -> Engine:
    """The preset of `name` on `gpu` (InputError listing the names when unknown)."""
    from dsim.hardware import engine_fit, gpu_fit, round_fit

    key = name.lower()
    if key not in ENGINES:
        raise InputError(None, None, f"unknown engine {name!r}; known: {names()}")
    description = ENGINES[key]
    if key == "gpu-only":
        vllm_sched = _vllm_scheduling(gpu)
        return Engine(key, description, "none (no terms)", StepOverhead(0.0, 0.0), vllm_sched)
    if key == "vllm-2023":
        sched = Scheduling(
            True,
            None,
            2048,
            "the rule the estimates of this engine were simulated with before presets existed "
            "(prefill in chunks of at most 2048 tokens sharing the decode step, no step token "
            "budget), kept so those results reproduce; vLLM 0.2 itself ran each prefill as a "
            "step of its own, whole prompts, before decode steps",
        )
        return Engine(key, description, "vLLM 2023 (Splitwise)", gpu_fit.step_overhead(), sched)
    fit = engine_fit.presets()
    borrowed = replace(RAGGED_PRIOR, source="vLLM's prior, borrowed: " + RAGGED_PRIOR.source)
    spec = dict(spec_round=round_fit.spec_round(), ragged=borrowed)
    if key == "vllm":
        return Engine(
            key, description, "vLLM 0.8.4 (V1)", fit["vllm"], _vllm_scheduling(gpu),
            spec_round=spec["spec_round"], ragged=RAGGED_PRIOR, spec_round_source=BORROWED,
        )  # fmt: skip
    if key == "sglang":
        sched = Scheduling(
            False,
            8192,
            None,
            "SGLang runs prefill batches as steps of their own, before decode, whenever a "
            "request waits to prefill (--enable-mixed-chunk is off by default; "
            "scheduler.get_next_batch_to_run tries a prefill batch first); chunked_prefill_size "
            "8192 on H200 (the fitted runs' log)",
        )
        return Engine(
            key, description, "SGLang 0.4.4-0.4.5.post3", fit["sglang"], sched, **spec,
            spec_round_source="fitted on SGLang's EAGLE-3 and MTP rows "
            "(docs/round-fit-rules.md)",
        )  # fmt: skip
    sched = Scheduling(
        True,
        8192,
        None,
        "TensorRT-LLM's in-flight batching puts context and generation requests in one step; "
        "max_num_tokens defaults to 8192",
    )
    return Engine(
        key, description, "NVIDIA NIM 1.8.0 (TensorRT-LLM presumed)", fit["trtllm"], sched,
        **spec, spec_round_source=BORROWED,
    )  # fmt: skip
