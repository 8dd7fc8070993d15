"""One setup's step pricing: the GPU, the model and its parallelism, the calibration, and the
collectives, CUDA graphs, elementwise fusion and decode attention kernel its engine uses,
bundled so that a target's step, a drafter's pass and the fits price them one way
(docs/design.md, The step-time model)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dsim.hardware import collectives, gpu_fit, zoo
from dsim.hardware.arch import Arch, Parallel
from dsim.hardware.attention import GEMM_FIT, AttentionKernel, Backend, backend
from dsim.hardware.fusion import UNFUSED, Fusion
from dsim.hardware.fusion import fusion as engine_fusion
from dsim.hardware.gpu_model import (
    GPUS,
    AllReduce,
    Gpu,
    Graphs,
    StepOverhead,
    step_costs,
    step_parts,
    step_seconds,
)


@dataclass(frozen=True)
class Pricing:
    """Everything a step's price depends on besides the engine's terms and the step's shape."""

    gpu: Gpu
    arch: Arch
    par: Parallel
    cal: gpu_fit.Calibration
    reduce: AllReduce
    graphs: Graphs | None
    fusion: Fusion = UNFUSED
    backend: Backend | None = None  # None: the GEMM fit for decode attention too

    @property
    def attention(self) -> AttentionKernel:
        """The decode attention kernel this body runs with (MLA or not) on this GPU."""
        if self.backend is None:
            return GEMM_FIT
        return self.backend.kernel(self.arch, self.gpu.calibration)

    def parts(self, tokens, seqs, context, prefill, moe_scale=1.0) -> dict[str, np.ndarray]:
        """GPU seconds by operator (`gpu_model.step_parts`), at the tokens given and the
        engine's grouped-GEMM scale."""
        return step_parts(
            self.arch,
            self.par,
            self.gpu,
            self.cal.kernels,
            self.reduce,
            tokens,
            seqs,
            context,
            prefill,
            moe_scale,
            self.fusion,
            self.attention,
        )

    def costs(self, terms: StepOverhead, tokens, seqs, context, prefill) -> dict[str, np.ndarray]:
        """`gpu_model.step_costs`: GPU work, padding, overlapped and serialised host time."""
        return step_costs(
            self.arch,
            self.par,
            self.gpu,
            self.cal.kernels,
            self.reduce,
            terms,
            tokens,
            seqs,
            context,
            prefill,
            self.graphs,
            self.fusion,
            self.attention,
        )

    def step(self, terms: StepOverhead, tokens, seqs, context, prefill) -> np.ndarray:
        """Seconds of a step: max(GPU work, overlapped host) + serialised host."""
        return step_seconds(self.costs(terms, tokens, seqs, context, prefill))

    def with_arch(self, arch: Arch) -> Pricing:
        """The same setup running another body (a drafter's layers)."""
        return replace(self, arch=arch)


def pricing(
    model: str | Arch,
    gpu: str,
    par: Parallel,
    custom_allreduce: bool,
    graphs: Graphs | None,
    version: str | None = None,
) -> Pricing:
    """The pricing of `model` on `gpu` with `par` and an engine's collectives and graphs; with
    an engine `version`, its elementwise fusion and decode attention kernel (priors), else the
    calibration's own (Vidur's eager kernels, the GEMM fit)."""
    spec = GPUS[gpu]
    cal = gpu_fit.calibration(spec)
    arch = zoo.load_arch(model) if isinstance(model, str) else model
    reduce = collectives.for_engine(cal.allreduce, custom_allreduce)
    if version is None:
        return Pricing(spec, arch, par, cal, reduce, graphs)
    return Pricing(spec, arch, par, cal, reduce, graphs, engine_fusion(version), backend(version))
