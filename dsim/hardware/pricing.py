"""One setup's step pricing: the GPU, the model and its parallelism, the calibration, and the
collectives and CUDA graphs its engine uses, bundled so that a target's step, a drafter's pass
and the fits price them one way (docs/design.md, The step-time model)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dsim.hardware import collectives, gpu_fit, zoo
from dsim.hardware.arch import Arch, Parallel
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
        )

    def step(self, terms: StepOverhead, tokens, seqs, context, prefill) -> np.ndarray:
        """Seconds of a step: max(GPU work, overlapped host) + serialised host."""
        return step_seconds(self.costs(terms, tokens, seqs, context, prefill))

    def with_arch(self, arch: Arch) -> Pricing:
        """The same setup running another body (a drafter's layers)."""
        return replace(self, arch=arch)


def pricing(
    model: str | Arch, gpu: str, par: Parallel, custom_allreduce: bool, graphs: Graphs | None
) -> Pricing:
    """The pricing of `model` on `gpu` with `par` and an engine's collectives and graphs."""
    spec = GPUS[gpu]
    cal = gpu_fit.calibration(spec)
    arch = zoo.load_arch(model) if isinstance(model, str) else model
    reduce = collectives.for_engine(cal.allreduce, custom_allreduce)
    return Pricing(spec, arch, par, cal, reduce, graphs)
