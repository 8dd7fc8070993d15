"""Engine presets: what a serving engine adds to the GPU work of a step (docs/design.md, The
step-time model; profiles/README.md, Engine presets).

A preset is the engine's step terms (`StepOverhead`: per step, per layer, per MoE layer, per
sequence, per sampled token; fitted on published end-to-end runs of that engine, or a stated
prior where its runs cannot pin a term) plus its scheduling behaviour where engines differ:
whether a prefill chunk shares a step with decode work, and the step's token budget. The
terms come from `engine_fit` (deterministic, computed when first asked for), so a sidecar's
numbers are always the fit's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dsim.errors import InputError
from dsim.hardware.gpu_model import StepOverhead

DEFAULT_ENGINE = "vllm"


@dataclass(frozen=True)
class Scheduling:
    """How the engine fills a step, from its documentation (recorded in the sidecar)."""

    mixed_prefill: bool  # prefill chunks share a step with decode work
    token_budget: int | None  # tokens per step (prefill + verify); None: whole prompts
    source: str


@dataclass(frozen=True)
class Engine:
    """One preset: its name, what it stands for, the version fitted on, terms and scheduling."""

    name: str
    description: str
    fitted_on: str
    terms: StepOverhead
    scheduling: Scheduling

    def record(self, scale: float = 1.0) -> dict:
        """What a profile sidecar says about the engine (terms as charged, after `scale`)."""
        return {
            "name": self.name,
            "description": self.description,
            "fitted_on": self.fitted_on,
            "overhead_scale": scale,
            "terms_s": asdict(self.terms.scaled(scale)),
            "fitted_terms_s": asdict(self.terms),
            "scheduling": asdict(self.scheduling),
        }


VLLM_SCHED = Scheduling(
    True,
    8192,
    "vLLM V1 always chunks prefill into decode steps; max_num_batched_tokens defaults to 8192 "
    "for the API server on H100/H200 (by device name, 0.8.4 included; since 0.9 on any GPU of "
    ">= 70 GB other than A100; vllm/engine/arg_utils.py), 2048 on other GPUs",
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


def get_engine(name: str) -> Engine:
    """The preset of `name` (InputError listing the names when unknown)."""
    from dsim.hardware import engine_fit, gpu_fit

    key = name.lower()
    if key not in ENGINES:
        raise InputError(None, None, f"unknown engine {name!r}; known: {names()}")
    description = ENGINES[key]
    if key == "gpu-only":
        return Engine(key, description, "none (no terms)", StepOverhead(0.0, 0.0), VLLM_SCHED)
    if key == "vllm-2023":
        sched = Scheduling(
            False,
            None,
            "vLLM 0.2 (2023) ran each prefill as a step of its own, whole prompts, before decode "
            "steps (no chunked prefill)",
        )
        return Engine(key, description, "vLLM 2023 (Splitwise)", gpu_fit.step_overhead(), sched)
    fit = engine_fit.presets()
    if key == "vllm":
        return Engine(key, description, "vLLM 0.8.4 (V1)", fit["vllm"], VLLM_SCHED)
    if key == "sglang":
        sched = Scheduling(
            False,
            8192,
            "SGLang runs prefill batches as steps of their own (--enable-mixed-chunk is off by "
            "default); chunked_prefill_size 8192 on H200 (the fitted runs' log)",
        )
        return Engine(key, description, "SGLang 0.4.4-0.4.5.post3", fit["sglang"], sched)
    sched = Scheduling(
        True,
        8192,
        "TensorRT-LLM's in-flight batching puts context and generation requests in one step; "
        "max_num_tokens defaults to 8192",
    )
    return Engine(
        key, description, "NVIDIA NIM 1.8.0 (TensorRT-LLM presumed)", fit["trtllm"], sched
    )
