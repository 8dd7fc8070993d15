"""The targets a plan searches: one step-time profile per GPU type, TP degree and engine,
estimated by the calibrated roofline (`dsim profile --roofline`) in memory and written under
the plan's folder before its search, or given as estimate files whose sidecars say the rest."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from dsim.errors import InputError
from dsim.hardware.latency import profile_metadata, write_profile
from dsim.hardware.roofline import roofline_profile


@dataclass(frozen=True)
class Target:
    """A model served on one replica: its profile and what the plan reads from its sidecar."""

    profile: str  # the CSV the plan's specs name
    model: str
    gpu: str
    engine: str
    tp: int
    gpus: int  # GPUs one replica runs on

    @property
    def label(self) -> str:
        return f"{self.gpu} tp{self.tp} {self.engine}"


@dataclass(frozen=True)
class Estimate:
    """A target whose profile is built, not yet written (`write`, after every check)."""

    target: Target
    table: pd.DataFrame = field(compare=False)
    meta: dict = field(compare=False)

    def write(self, folder: Path) -> Target:
        """Write the CSV and its sidecar into `folder` (the same bytes for the same estimate:
        no date, so a rerun's points keep their cache keys); the target naming that file."""
        path = folder / Path(self.target.profile).name
        write_profile(self.table, path, self.meta)
        return replace(self.target, profile=str(path))


def estimate(gpu: str, model: str, tp: int, engine: str) -> Estimate:
    """The roofline estimate of `model` on `gpu` x `tp` under `engine` (tens of milliseconds);
    an InputError when the model's weights do not fit."""
    table, meta = roofline_profile(gpu, model, tp=tp, engine=engine)
    meta["command"] = (
        f"dsim profile --roofline {gpu} --model {model} --tp {tp} --engine {engine} (dsim plan)"
    )
    name = f"{gpu.lower()}-{model}-tp{tp}-{engine}-roofline.csv"
    gpus = int(meta["parallel"]["gpus"])
    return Estimate(Target(name, model, gpu.lower(), engine, tp, gpus), table, meta)


def estimates(
    gpus: tuple[str, ...], model: str, tps: tuple[int, ...], engines: tuple[str, ...]
) -> tuple[list[Estimate], list[str]]:
    """Every (GPU, TP, engine) estimate whose weights fit, and one line per TP that does not;
    when no TP fits a GPU, the first refusal is the error (one line: raise --tp, or fp8)."""
    built, skipped = [], []
    for gpu in gpus:
        for engine in engines:
            fits, refusals = [], []
            for tp in tps:
                try:
                    fits.append(estimate(gpu, model, tp, engine))
                except InputError as exc:
                    refusals.append((tp, exc))
            if not fits:
                tp, exc = refusals[0]
                raise InputError(None, None, f"--tp {tp} on {gpu}: {exc}")
            built += fits
            skipped += [f"--tp {tp} on {gpu} left out: {exc}" for tp, exc in refusals]
    return built, list(dict.fromkeys(skipped))


def given(path: str) -> Target:
    """A profile file as a target: its sidecar must say the GPUs a replica runs on (an
    estimate's does; a measurement's does not, and a plan cannot count GPUs without it)."""
    meta = profile_metadata(path)
    gpus = meta.get("parallel", {}).get("gpus")
    if gpus is None:
        raise InputError(
            path, None, "its sidecar says no GPU count (parallel.gpus): plan needs an estimate "
            "(dsim profile --roofline GPU --model M --tp N) or a sidecar that says it",
        )  # fmt: skip
    engine = meta.get("engine", {}).get("name", "unknown")
    tp = int(meta["parallel"].get("tp", gpus))
    stem = Path(path).stem
    model, gpu = str(meta.get("model", stem)), str(meta.get("gpu", stem))
    return Target(path, model, gpu, str(engine), tp, int(gpus))
