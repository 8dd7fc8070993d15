"""The bench every phase of a validation works on: its settings, the loaded models, the
output folder, the log, the clocks the model passes are timed by and the reference pass."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsim.engine.clock import WallClock
from dsim.hardware.latency import profile_metadata
from dsim.validation.reference import Reference
from dsim.validation.settings import Settings
from dsim.validation.step_check import PassClocks, TimedBackend


@dataclass(frozen=True)
class Bench:
    """One study's settings and loaded models, where it writes, how it logs and what times
    its passes (tests inject a fake timing source)."""

    settings: Settings
    out: Path
    target: Any  # the loaded target (dsim.models.target)
    drafter: Any  # the loaded drafter
    log: Callable[[str], None]
    reference: Reference  # timed inside every real run (`dsim.validation.reference`)
    clocks: PassClocks = field(default_factory=PassClocks)
    started: float = field(default_factory=time.perf_counter)

    @classmethod
    def load(cls, s: Settings, out: Path, log: Callable[[str], None], clocks: PassClocks) -> Bench:
        """Load the models with the torch threads of the given profile, or 1 (real mode's) for
        the profile measured here."""
        import torch

        from dsim.real.runner import load_models, profile_threads

        threads = profile_threads(profile_metadata(s.profile)) if s.profile is not None else 1
        if threads:
            torch.set_num_threads(threads)
        target, drafter = load_models(s.target, s.drafter)
        reference = Reference(target, clocks, s.reference_every)
        return cls(s, out, target, drafter, log, reference, clocks)

    def backend(self, *args, **kwargs) -> TimedBackend:
        """Real mode's backend for every real run of the study, its passes timed by `clocks`
        and the reference pass timed inside it."""
        return TimedBackend(*args, clocks=self.clocks, reference=self.reference, **kwargs)

    def clock(self) -> WallClock:
        """Real mode's clock for every real run: wall time, reference passes left out."""
        return self.reference.clock()
