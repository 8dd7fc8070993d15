"""Engine presets: what a serving engine adds to the GPU work of a step (docs/design.md, The
step-time model; profiles/README.md, Engine presets; the rules: docs/engine-v2-rules.md).

A preset names the engine version its terms come from and holds: its host time per step and
per sequence, serialised after the GPU work or overlapped with it (`StepOverhead`, fitted by
`engine_fit` on published runs of that engine, or a stated transfer), the scale of its MoE
grouped GEMMs' bandwidth efficiency on the published kernels' (`moe`), the CUDA graphs it
captures (`Graphs`: sizes, padding, launches where they do not cover a step), whether it runs
the custom all-reduce, its speculative round (`SpecRound`: per round and the host time per
proposer step, fitted by `round_fit`), the ragged-verify penalty of its graph mode, and its
scheduling where engines differ (whether a prefill chunk shares a step with decode work, the
step's token budget). The fits are deterministic and computed when first asked for, so a
sidecar's numbers are always the fits'.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from dsim.errors import InputError
from dsim.hardware import moe
from dsim.hardware.gpu_model import GRAPH_MODES, Graphs, SpecRound, StepOverhead
from dsim.hardware.graph_priors import graphs

DEFAULT_ENGINE = "vllm"
ADMISSIONS = ("recompute", "reserve")


@dataclass(frozen=True)
class Scheduling:
    """How the engine fills a step, from its documentation: recorded in the sidecar and, unless
    a run sets them, the run's defaults (`dsim.run_inputs.resolve_engine`)."""

    mixed_prefill: bool  # prefill chunks share a step with decode work (False: prefill first)
    token_budget: int | None  # tokens per step (prefill + verify); None: no step budget
    prefill_chunk: int | None  # prefill tokens per step; None: what the budget leaves
    source: str
    # How requests are admitted to the KV cache (ADMISSIONS): "recompute" takes a prompt's
    # blocks and preempts the newest request by recompute when a decode step's KV does not
    # fit; "reserve" takes the blocks of prompt + every output token and never preempts.
    admission: str = "recompute"

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
        admission = record.get("admission", "recompute")  # sidecars before the rule: vLLM's
        if admission not in ADMISSIONS:
            raise InputError(
                where,
                None,
                f"engine.scheduling.admission must be one of {', '.join(ADMISSIONS)}, "
                f"got {admission!r}",
            )
        return cls(mixed, budget, chunk, str(record.get("source", "")), admission)


@dataclass(frozen=True)
class Ragged:
    """The multiplier (1 + penalty) on the target pass of a step whose requests verify
    different lengths (docs/design.md, Ragged verify lengths): paid only where the engine
    version runs such a step in a worse graph mode than a uniform verify step (`mode`)."""

    penalty: float
    low: float
    high: float
    mode: str  # the graph mode of a ragged verify step: full, piecewise or eager
    source: str


GB10_PIECEWISE = round(1 / 0.84 - 1, 4)  # 16% lower throughput, i.e. steps 1.19x
RAGGED_SOURCE = (
    f"range 0 to {GB10_PIECEWISE}: vLLM runs a verify step whose lengths differ in PIECEWISE "
    "graphs on GPUs other than SM100 (PR #47808); measured on a GB10 that costs 16% of "
    "single-stream throughput against FULL graphs (vllm-project/vllm #49547, #49548: steps "
    "1/0.84 = 1.19x, a bandwidth-poor GPU); on an H100 piecewise and full graphs were on par "
    "for an 8B "
    "EAGLE drafter (PR #21477), so on Hopper and Ampere the prior is the low end"
)


def ragged_prior(mode: str) -> Ragged:
    """The penalty of a ragged verify step run in `mode` on the GPUs dsim prices (Hopper,
    Ampere): none where that is the uniform step's mode too."""
    if mode == "same":
        return Ragged(
            0.0,
            0.0,
            0.0,
            mode,
            "a ragged verify step runs in the graph mode of a "
            "uniform one (no full graph to fall back from)",
        )
    return Ragged(0.0, 0.0, GB10_PIECEWISE, mode, RAGGED_SOURCE)


NO_RAGGED = Ragged(0.0, 0.0, 0.0, "same", "no CUDA graphs to fall back from")


@dataclass(frozen=True)
class Engine:
    """One preset: its name, what it stands for, the version its terms come from, its terms,
    graphs, collectives and scheduling."""

    name: str
    description: str
    fitted_on: str
    terms: StepOverhead
    scheduling: Scheduling
    spec_round: SpecRound = SpecRound()
    spec_round_source: str = "none (no speculative machinery priced)"
    ragged: Ragged = NO_RAGGED
    graphs: Graphs | None = None
    custom_allreduce: bool = False

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
            "graphs": None if self.graphs is None else asdict(self.graphs),
            "collectives": "custom one-shot/two-shot all-reduce below 8 MiB, NCCL above"
            if self.custom_allreduce
            else "NCCL",
            "spec_round": {
                "terms_s": asdict(self.spec_round.scaled(scale)),
                "fitted_terms_s": asdict(self.spec_round),
                "source": self.spec_round_source,
            },
            "ragged": asdict(self.ragged) | {"penalty": self.ragged.penalty * scale},
            "moe": moe.record(),
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


VLLM_2023_SCHEDULING = Scheduling(
    True,
    None,
    2048,
    "the rule the estimates of this engine were simulated with before presets existed "
    "(prefill in chunks of at most 2048 tokens sharing the decode step, no step token "
    "budget), kept so those results reproduce; vLLM 0.2 itself ran each prefill as a "
    "step of its own, whole prompts, before decode steps",
)
SGLANG_SCHEDULING = Scheduling(
    False,
    8192,
    None,
    "SGLang runs prefill batches as steps of their own, before decode, whenever a "
    "request waits to prefill (--enable-mixed-chunk is off by default; "
    "scheduler.get_next_batch_to_run tries a prefill batch first); chunked_prefill_size "
    "8192 on H200 (the fitted runs' log)",
)
TRTLLM_SCHEDULING = Scheduling(
    True,
    8192,
    None,
    "TensorRT-LLM's in-flight batching puts context and generation requests in one step; "
    "max_num_tokens defaults to 8192; its default capacity scheduler, GUARANTEED_NO_EVICT, "
    "admits a request only when the KV blocks of its prompt and all its output tokens are "
    "free and never evicts one (SchedulerConfig.capacity_scheduler_policy)",
    admission="reserve",
)
ENGINES: dict[str, str] = {
    "vllm": "vLLM (>= 0.11: async scheduling, full CUDA graphs for decode and verify)",
    "vllm-0.8": "vLLM 0.8 V1 (piecewise CUDA graphs, host work serialised)",
    "sglang": "SGLang 0.4 with CUDA graphs and overlap scheduling",
    "trtllm": "TensorRT-LLM (as behind NVIDIA NIM)",
    "vllm-2023": "vLLM 2023 in eager mode (no CUDA graphs), fitted on Splitwise",
    "gpu-only": "GPU work only: no engine overhead (the bound a perfect engine approaches)",
}
VLLM_HOST = (
    "vLLM 0.8.4's fitted host work, overlapped with the GPU: async scheduling is on by default "
    "(vllm/config/vllm.py @ 000fc94; for EAGLE/MTP since PR #31998), a transfer, not a fit"
)


def names() -> str:
    return ", ".join(ENGINES)


# The GPU vendors each engine runs on: TensorRT-LLM builds CUDA engines for NVIDIA GPUs only;
# vLLM and SGLang also run on AMD Instinct GPUs through ROCm (their ROCm builds and docs).
NVIDIA_ONLY = ("trtllm",)


def check_runs_on(engine: str, gpu: str, vendor: str) -> None:
    """Refuse an engine on a GPU it does not run on (one line)."""
    if vendor != "nvidia" and engine.lower() in NVIDIA_ONLY:
        raise InputError(
            None,
            None,
            f"engine {engine.lower()} does not run on {gpu.lower()} (TensorRT-LLM runs on NVIDIA "
            "GPUs only): use --engine vllm or sglang (both run on ROCm)",
        )


def get_engine(name: str, gpu: str | None = None) -> Engine:
    """The preset of `name` on `gpu` (InputError listing the names when unknown)."""
    from dsim.hardware import engine_fit, gpu_fit, proposer_host_fit, round_fit

    key = name.lower()
    if key not in ENGINES:
        raise InputError(None, None, f"unknown engine {name!r}; known: {names()}")
    description = ENGINES[key]
    if key == "gpu-only":
        vllm_sched = _vllm_scheduling(gpu)
        return Engine(
            key,
            description,
            "none (no terms)",
            StepOverhead(0.0, 0.0),
            vllm_sched,
            custom_allreduce=True,
        )
    if key == "vllm-2023":
        sched = VLLM_2023_SCHEDULING
        return Engine(key, description, "vLLM 2023 (Splitwise)", gpu_fit.step_overhead(), sched)
    fit, rounds = engine_fit.presets(), round_fit.spec_rounds()
    common = dict(custom_allreduce=True, graphs=graphs(key, gpu))
    if key in ("vllm", "vllm-0.8"):
        spec_round, spec_source = (
            (rounds["vllm-0.8"], round_fit.SOURCES["vllm-0.8"])
            if key == "vllm-0.8"
            else proposer_host_fit.current_round()
        )
        fitted = "vLLM 0.8.4 (V1)" + (
            ", host work overlapped (async scheduling)" if key == "vllm" else ""
        )
        return Engine(
            key,
            description,
            fitted,
            fit[key],
            _vllm_scheduling(gpu),
            spec_round=spec_round,
            ragged=ragged_prior("piecewise" if key == "vllm" else "same"),
            spec_round_source=spec_source,
            **common,
        )
    if key == "sglang":
        return Engine(
            key,
            description,
            "SGLang 0.4.4-0.4.5.post3",
            fit["sglang"],
            SGLANG_SCHEDULING,
            spec_round=rounds["sglang"],
            spec_round_source=round_fit.SOURCES["sglang"],
            ragged=ragged_prior("eager"),
            **common,
        )
    return Engine(
        key,
        description,
        "NVIDIA NIM 1.8.0 (TensorRT-LLM presumed)",
        fit["trtllm"],
        TRTLLM_SCHEDULING,
        spec_round=rounds["sglang"],
        ragged=ragged_prior("eager"),
        custom_allreduce=True,
        spec_round_source="borrowed from sglang (this engine has no speculative row)",
    )


def with_graphs(preset: Engine, sizes: tuple[int, ...] | None, mode: str | None) -> Engine:
    """`preset` with the user's capture sizes and decode graph mode in place of its priors
    (`--capture-sizes`, `--graph-mode`); refused for a preset that prices no graphs."""
    if sizes is None and mode is None:
        return preset
    if preset.graphs is None:
        raise InputError(
            None,
            None,
            f"--capture-sizes and --graph-mode price CUDA graphs, which "
            f"engine {preset.name} does not model: use vllm, vllm-0.8 or sglang",
        )
    if sizes and mode == "eager":
        raise InputError(
            None, None, "--capture-sizes has no effect with --graph-mode eager (decode captures "
            "no graphs): give one or the other"
        )  # fmt: skip
    budget = preset.scheduling.token_budget
    if sizes and budget is not None and sizes[-1] > budget:
        raise InputError(
            None, None, f"--capture-sizes: {sizes[-1]} is above engine {preset.name}'s step "
            f"token budget ({budget}): a step never holds that many tokens; list sizes up to "
            f"{budget}"
        )  # fmt: skip
    if mode is not None and mode not in GRAPH_MODES:
        raise InputError(
            None, None, f"--graph-mode: unknown {mode!r}; known: {', '.join(GRAPH_MODES)}"
        )
    graphs = replace(
        preset.graphs,
        sizes=sizes or preset.graphs.sizes,
        decode=mode or preset.graphs.decode,
        source=preset.graphs.source + " (overridden: --capture-sizes/--graph-mode)",
    )
    return replace(preset, graphs=graphs)
