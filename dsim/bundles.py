"""A target profile and the drafter cost that prices its rounds belong together: a drafter
profile is priced beside one target (model, GPU, TP degree: its sidecar says them), and read
beside another it prices the wrong drafter pass. Sweeps and plans pair each profile with its
own drafter cost (a bundle) and refuse a pair whose sidecars disagree, before any work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsim import shipped, spec_grammar
from dsim.engine.config import DRAFTER_KINDS
from dsim.errors import InputError
from dsim.fileio import sidecar_of
from dsim.hardware.latency import profile_metadata

# What a sidecar says about the target setup, and the words that name it.
_SETUP = (("model", "{}"), ("gpu", "on {}"), ("tp", "tp{}"))


def _sidecar(path: str) -> dict[str, Any]:
    return profile_metadata(shipped.locate(path))


def _setup(meta: dict[str, Any]) -> dict[str, str]:
    """The target setup a sidecar states (model, GPU, TP degree), only what it says."""
    found = {"model": meta.get("model"), "gpu": meta.get("gpu")}
    found["tp"] = meta.get("parallel", {}).get("tp")
    return {k: str(v).lower() for k, v in found.items() if v is not None}


def _words(found: dict[str, str]) -> str:
    return " ".join(text.format(found[k]) for k, text in _SETUP if k in found)


def drafter_kind(draft_cost: str) -> str:
    """The drafter kind a drafter profile's sidecar names (`auto` for a ratio, or a file whose
    sidecar names none)."""
    return kind_of(spec_grammar.draft_cost(draft_cost).profile)


def kind_of(drafter: str | None) -> str:
    """`drafter_kind` of a drafter profile's path (None: no profile); a kind dsim does not know
    is the sidecar's fault, so its line names the sidecar, not `--drafter-kind`."""
    if drafter is None:
        return "auto"
    kind = _sidecar(drafter).get("drafter_kind", "auto")
    if kind not in DRAFTER_KINDS:
        raise InputError(
            sidecar_of(shipped.locate(drafter)), None,
            f"drafter_kind must be one of {', '.join(DRAFTER_KINDS)}, got {kind!r}",
        )  # fmt: skip
    return str(kind)


def draft_model(draft_cost: str) -> str | None:
    """The drafter a drafter profile's sidecar names (`eagle3`, `mtp`, ...; None for a ratio
    or a file whose sidecar names none)."""
    path = spec_grammar.draft_cost(draft_cost).profile
    return None if path is None else _sidecar(path).get("draft_model")


def check(profile: str, draft_cost: str, fix: str, meta: dict[str, Any] | None = None) -> None:
    """Refuse a drafter profile whose sidecar names another target model, GPU or TP degree
    than `profile`'s sidecar (`meta` when it is not written yet; a setting either sidecar
    leaves out is not compared)."""
    check_pair(profile, spec_grammar.draft_cost(draft_cost).profile, fix, meta)


def check_pair(
    profile: str, path: str | None, fix: str, meta: dict[str, Any] | None = None
) -> None:
    """`check` of a drafter profile's path (None: no profile). Only a drafter estimate (its
    sidecar names the `draft_model` it prices) states the target it was priced beside; a
    measured drafter's sidecar names the drafter itself as its model."""
    if path is None or "draft_model" not in (side := _sidecar(path)):
        return
    drafter = _setup(side)
    target = _setup(_sidecar(profile) if meta is None else meta)
    differ = [k for k in drafter if k in target and drafter[k] != target[k]]
    if differ:
        raise InputError(
            None,
            None,
            f"drafter profile {path} is priced beside {_words(drafter)} "
            f"({Path(path).with_suffix('.json').name}), but profile {profile} is "
            f"{_words(target)} ({Path(profile).with_suffix('.json').name}): they differ in "
            f"{', '.join(differ)}; {fix}",
        )
