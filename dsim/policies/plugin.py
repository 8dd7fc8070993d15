"""Plug-in verification policies: `--policy module.path:ClassName` or `path/to/file.py:ClassName`.

The class is built as `ClassName()`, or `ClassName(sla_tps=X)` when an SLA is set, and must
follow the policy protocol of docs/policies.md. The adapter checks what the plug-in returns, so
a wrong shape or range is one clear error, not a crash deep in the engine.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from dsim.errors import InputError
from dsim.policies.protocol import SPS, Traits, policy_traits


def _import(target: str) -> ModuleType:
    if not target.endswith(".py"):
        return importlib.import_module(target)
    path = Path(target)
    if not path.is_file():
        raise InputError(target, None, "policy file not found")
    name = f"dsim_policy_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses in the file look their module up here
    spec.loader.exec_module(module)
    return module


def plugin_maker(spec: str, sla_tps: float | None = None) -> Callable[[], PlugIn]:
    """Import `spec`'s module once; the maker builds a fresh checked instance per call."""
    target, _, cls_name = spec.rpartition(":")
    try:
        module = _import(target)
    except InputError:
        raise
    except Exception as exc:  # the user's module may fail in any way: one line, exit 2
        raise InputError(None, None, f"policy {spec!r}: cannot import {target!r}: {exc}") from None
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise InputError(None, None, f"policy {spec!r}: {target!r} has no {cls_name!r}")
    return lambda: _build(cls, cls_name, spec, sla_tps)


def load_plugin(spec: str, sla_tps: float | None = None) -> PlugIn:
    """Import `spec`'s class, build it, and wrap it in the checking adapter."""
    return plugin_maker(spec, sla_tps)()


def _build(cls: type, cls_name: str, spec: str, sla_tps: float | None) -> PlugIn:
    try:
        policy = cls() if sla_tps is None else cls(sla_tps=sla_tps)
    except Exception as exc:
        args = "" if sla_tps is None else f"sla_tps={sla_tps}"
        raise InputError(None, None, f"policy {spec!r}: {cls_name}({args}) failed: {exc}") from None
    if not callable(getattr(policy, "lengths", None)) or not hasattr(policy, "drafts"):
        raise InputError(
            None,
            None,
            f"policy {spec!r}: needs a lengths(conf, sps, truth) method and a drafts attribute "
            "(docs/policies.md)",
        )
    return PlugIn(policy, spec)


@dataclass
class PlugIn:
    """A user's policy behind the protocol checks, its traits read once with the protocol's
    defaults filled in (`policy_traits`)."""

    inner: object
    name: str
    traits: Traits = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.traits = policy_traits(self.inner)

    @property
    def drafts(self) -> bool:
        return self.traits.drafts

    @property
    def synchronous(self) -> bool:
        return self.traits.synchronous

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray | None) -> np.ndarray:
        out = np.asarray(self.inner.lengths(conf, sps, truth))
        r, gamma = conf.shape
        if (
            out.shape != (r,)
            or not np.issubdtype(out.dtype, np.integer)
            or (out.size and (out.min() < 0 or out.max() > gamma))
        ):
            raise InputError(
                None,
                None,
                f"policy {self.name!r} returned {out.dtype} of shape {out.shape}; "
                f"expected {r} integers in 0..{gamma}",
            )
        return out.astype(np.int64)

    def observe(self, lengths: np.ndarray, accepted: np.ndarray) -> None:
        if self.traits.observe is not None:
            self.traits.observe(lengths, accepted)
