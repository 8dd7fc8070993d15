"""The targets a plan searches: one step-time profile per GPU type, TP degree and engine,
estimated by the calibrated roofline (`dsim profile --roofline`) in memory and written under
the plan's folder before its search, or given as estimate files whose sidecars say the rest.
Each target is a bundle: its profile, the drafter cost priced for it (with `--draft-model`, a
drafter estimate built beside each target's, `dsim profile --roofline --draft-model`) and its
engine."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from dsim import bundles
from dsim.errors import InputError
from dsim.hardware.draft_pass import get_draft_model
from dsim.hardware.draft_roofline import drafter_profile
from dsim.hardware.latency import profile_metadata, write_profile
from dsim.hardware.roofline import roofline_profile
from dsim.run_spec import default


@dataclass(frozen=True)
class Target:
    """A model served on one replica: its profile and what the plan reads from its sidecar."""

    profile: str  # the CSV the plan's specs name
    model: str
    gpu: str
    engine: str
    tp: int
    gpus: int  # GPUs one replica runs on
    draft_cost: str = default("draft_cost")  # `0`, `ratio:X` or a drafter profile priced for it
    drafter_kind: str = "auto"  # how a round's drafter passes are priced (`dsim run`'s option)

    @property
    def label(self) -> str:
        return f"{self.gpu} tp{self.tp} {self.engine}"

    def with_draft_cost(self, draft_cost: str, fix: str, meta: dict | None = None) -> Target:
        """This target with `draft_cost`, its drafter kind the one the drafter profile's
        sidecar names; refused in one line ending in `fix` when that profile was priced for
        another target (`meta`: the profile's sidecar, when it is not written yet)."""
        bundles.check(self.profile, draft_cost, fix, meta)
        return replace(self, draft_cost=draft_cost, drafter_kind=bundles.drafter_kind(draft_cost))


@dataclass(frozen=True)
class Built:
    """A profile built in memory, written after every check (`write`)."""

    name: str
    table: pd.DataFrame = field(compare=False)
    meta: dict = field(compare=False)

    def write(self, folder: Path) -> None:
        """Write the CSV and its sidecar into `folder` (the same bytes for the same estimate:
        no date, so a rerun's points keep their cache keys)."""
        write_profile(self.table, folder / self.name, self.meta)


@dataclass(frozen=True)
class Estimate:
    """A target whose profile (and drafter profile) are built, not yet written."""

    target: Target  # naming the files by their names alone
    profile: Built
    drafter: Built | None = None

    def named_in(self, folder: Path) -> Target:
        """The target naming its files by their place in `folder`."""
        target = replace(self.target, profile=str(folder / self.profile.name))
        if self.drafter is None:
            return target
        return replace(target, draft_cost=str(folder / self.drafter.name))

    def write(self, folder: Path) -> Target:
        """Write the files into `folder`; the target naming them there."""
        for built in (self.profile, self.drafter):
            if built is not None:
                built.write(folder)
        return self.named_in(folder)

    def with_draft_cost(self, draft_cost: str, fix: str) -> Estimate:
        """The estimate with `draft_cost` for its target (checked against its sidecar)."""
        target = self.target.with_draft_cost(draft_cost, fix, self.profile.meta)
        return replace(self, target=target)


def estimate(gpu: str, model: str, tp: int, engine: str, draft_model: str | None) -> Estimate:
    """The roofline estimate of `model` on `gpu` x `tp` under `engine` (tens of milliseconds),
    and of drafter `draft_model` beside it; an InputError when the model's weights do not
    fit."""
    table, meta = roofline_profile(gpu, model, tp=tp, engine=engine)
    flags = f"--roofline {gpu} --model {model} --tp {tp} --engine {engine}"
    meta["command"] = f"dsim profile {flags} (dsim plan)"
    stem = f"{gpu.lower()}-{model}-tp{tp}-{engine}"
    gpus = int(meta["parallel"]["gpus"])
    target = Target(f"{stem}-roofline.csv", model, gpu.lower(), engine, tp, gpus)
    if draft_model is None:
        return Estimate(target, Built(target.profile, table, meta))
    dtable, dmeta = drafter_profile(gpu, model, draft_model, tp=tp, engine=engine)
    dmeta["command"] = f"dsim profile {flags} --draft-model {draft_model} (dsim plan)"
    drafter = Built(f"{stem}-{draft_model.lower()}-roofline.csv", dtable, dmeta)
    target = replace(target, draft_cost=drafter.name, drafter_kind=str(dmeta["drafter_kind"]))
    return Estimate(target, Built(target.profile, table, meta), drafter)


def estimates(
    gpus: tuple[str, ...],
    model: str,
    tps: tuple[int, ...],
    engines: tuple[str, ...],
    draft_model: str | None,
) -> tuple[list[Estimate], list[str]]:
    """Every (GPU, TP, engine) estimate whose weights fit, and one line per TP that does not;
    when no TP fits a GPU, the first refusal is the error (one line: raise --tp, or fp8)."""
    if draft_model is not None:
        get_draft_model(draft_model)  # an unknown name is one line before any estimate
    built, skipped = [], []
    for gpu in gpus:
        for engine in engines:
            fits, refusals = [], []
            for tp in tps:
                try:
                    fits.append(estimate(gpu, model, tp, engine, draft_model))
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
